"""``tests.settings_sqlite`` with the broker's database on an engine django_taskmq refuses.

``TASKMQ_ENGINE`` names the ``ENGINE``: by default ``tests.fancydb``, a working Django backend of
an engine django_taskmq does not know (see its module)."""

import os

from tests.settings_sqlite import *  # noqa: F401,F403

DATABASES = {
    **DATABASES,  # noqa: F405
    # (A path that cannot exist: the refusal must come before any connection.)
    "default": {"ENGINE": os.environ.get("TASKMQ_ENGINE", "tests.fancydb"), "NAME": "/nonexistent/taskmq_refused"},
}
