"""Django's SQLite backend under another vendor name: a real, working backend of an engine that
django_taskmq has no dialect for (Django imports a backend at start-up, so one whose driver is
missing, such as Oracle's here, fails before any check could run)."""

from django.db.backends.sqlite3.base import DatabaseWrapper as SQLiteDatabaseWrapper


class DatabaseWrapper(SQLiteDatabaseWrapper):
    vendor = "fancydb"
    display_name = "FancyDB"
