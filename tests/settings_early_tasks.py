"""``tests.settings_sqlite`` with an app that defines Django tasks while the apps load
(``tests.django6.early_app``, listed first). ``TASKMQ_DB_NAME`` names the database file."""

from tests.settings_sqlite import *  # noqa: F401,F403

INSTALLED_APPS = ["tests.django6.early_app", *INSTALLED_APPS]  # noqa: F405
