"""The ``tests/djangoq`` suite's settings (see ``tests.settings_djangoq``) on PostgreSQL."""

from tests.settings_djangoq import *  # noqa: F401,F403
from tests.settings_postgresql import DATABASES  # noqa: F401
