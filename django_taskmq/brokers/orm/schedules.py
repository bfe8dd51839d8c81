"""Schedules in the database (``models.Schedule``): the scheduler's claim of due rows and every
write that changes one (its creation by :func:`~django_taskmq.schedule`, a fired run, the admin's
form, pause, resume and delete), so that nothing outside the broker writes a schedule row.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from typing import Any

from ...exceptions import ConfigError
from ...models import Schedule

# The functions take the ORM broker (its alias, atomic) as ``broker``; not imported for its type,
# since the broker imports this module.
OrmBroker = Any


def due(broker: OrmBroker, now: datetime.datetime, limit: int) -> list[Schedule]:
    return list(
        Schedule.objects.using(broker.alias).select_for_update(skip_locked=True)
        .filter(next_run__lte=now, paused=False).exclude(repeats=0).order_by("next_run")[:limit]
    )


def store(broker: OrmBroker, name: str, values: Mapping[str, Any], replace: bool) -> Schedule:
    rows = Schedule.objects.using(broker.alias)
    # The write lock first: these read and then write, which on SQLite's default (deferred)
    # transactions fails at once with "database is locked" when another writer got in between.
    with broker.atomic(write=True):
        if not replace and rows.filter(name=name).exists():
            raise ConfigError(f"a schedule named {name!r} exists already")
        obj, created = rows.update_or_create(name=name, defaults=dict(values))
        if created and "next_run" in values and obj.next_run != values["next_run"]:
            # Schedule.save() gave a new cron row the expression's next run; the caller named its own.
            rows.filter(pk=obj.pk).update(next_run=values["next_run"])
            obj.next_run = values["next_run"]
    return obj


def save(broker: OrmBroker, schedule: Schedule, fields: Sequence[str] | None) -> None:
    schedule.save(using=broker.alias, update_fields=list(fields) if fields is not None else None)


def set_paused(broker: OrmBroker, schedule_ids: Sequence[int], paused: bool) -> int:
    return Schedule.objects.using(broker.alias).filter(pk__in=list(schedule_ids)).exclude(paused=paused) \
        .update(paused=paused)


def delete(broker: OrmBroker, schedule_ids: Sequence[int]) -> int:
    deleted, _ = Schedule.objects.using(broker.alias).filter(pk__in=list(schedule_ids)).delete()
    return deleted
