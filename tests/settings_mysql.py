"""Test settings on MySQL/MariaDB (127.0.0.1:3306, user root, no password), Django's mysqlclient backend."""

import os

from tests.settings_sqlite import *  # noqa: F401,F403

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.mysql",
        "NAME": os.environ.get("TASKMQ_DB_NAME", "taskmq"),
        "USER": os.environ.get("MYSQL_USER", "root"),
        "PASSWORD": os.environ.get("MYSQL_PASSWORD", ""),
        "HOST": os.environ.get("MYSQL_HOST", "127.0.0.1"),
        "PORT": os.environ.get("MYSQL_PORT", "3306"),
        "OPTIONS": {"charset": "utf8mb4"},
        "TEST": {"NAME": os.environ.get("TASKMQ_DB_NAME", "test_taskmq"), "CHARSET": "utf8mb4",
                 "COLLATION": "utf8mb4_unicode_ci"},
    }
}
