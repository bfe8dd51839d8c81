"""System checks: a wrong ``TASKMQ`` value fails at start-up with the setting's name."""

from __future__ import annotations

from django.conf import settings
from django.core import checks

from .conf import from_mapping
from .exceptions import ConfigError


def check_settings(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    try:
        conf = from_mapping(getattr(settings, "TASKMQ", None))
    except ConfigError as exc:
        return [checks.Error(str(exc), hint="See the settings page of the django_taskmq docs.", id="taskmq.E001")]
    if conf.database not in settings.DATABASES:
        return [checks.Error(
            f"TASKMQ['database'] {conf.database!r} is not in DATABASES",
            hint=f"Use one of {sorted(settings.DATABASES)}.", id="taskmq.E002",
        )]
    return []


def check_database(app_configs=None, databases=None, **kwargs) -> list[checks.CheckMessage]:
    messages: list[checks.CheckMessage] = []
    try:
        conf = from_mapping(getattr(settings, "TASKMQ", None))
    except ConfigError:
        return messages
    db = settings.DATABASES.get(conf.database, {})
    if db.get("ENGINE") == "django.db.backends.sqlite3":
        if db.get("OPTIONS", {}).get("transaction_mode") != "IMMEDIATE":
            messages.append(checks.Warning(
                "the SQLite broker database does not use transaction_mode IMMEDIATE",
                hint="qcluster takes the write lock up front on its own connections whatever DATABASES says; set "
                     "DATABASES[...]['OPTIONS']['transaction_mode'] = 'IMMEDIATE' so that web processes do too "
                     "and wait for the lock instead of failing with 'database is locked'.",
                id="taskmq.W001",
            ))
    return messages
