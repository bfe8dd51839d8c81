"""The ``tests/djangoq`` suite's settings (see ``tests.settings_djangoq``) on MySQL/MariaDB."""

from tests.settings_djangoq import *  # noqa: F401,F403
from tests.settings_mysql import DATABASES  # noqa: F401
