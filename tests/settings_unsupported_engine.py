"""``tests.settings_sqlite`` with the broker's database on an engine django_taskmq refuses.

``TASKMQ_ENGINE`` names the ``ENGINE`` (Oracle by default: Django has a backend for it, whose
driver is not installed here; the refusal must need neither the driver nor a server)."""

import os

from tests.settings_sqlite import *  # noqa: F401,F403

DATABASES = {
    **DATABASES,  # noqa: F405
    "default": {"ENGINE": os.environ.get("TASKMQ_ENGINE", "django.db.backends.oracle"), "NAME": "taskmq_refused",
                "HOST": "127.0.0.1", "PORT": "3306", "USER": "root", "PASSWORD": ""},
}
