"""Results in the Django cache: the ``cached`` option and ``TASKMQ['cached']``, as django-q2 keeps them.

The recorder (the monitor, or the calling process in sync mode) writes the record of a job that
asked for it once its final outcome committed, as it runs hooks; ``result``, ``fetch``,
``result_group`` and ``count_group`` read it with ``cached=True``. A record is signed like a stored
result (:func:`~django_taskmq.envelope.seal_result`), and the result inside it is the one the worker
signed: nothing read from the cache is unpickled before it verified. Jobs that do not ask for the
cache never reach this module.

Keys, in ``caches[TASKMQ['cache']]`` (``<g>`` is the SHA-1 of the group name, so any group name
makes a key every backend accepts)::

    taskmq:<name>:job:<job id>     the signed record of one finished job
    taskmq:<name>:group:<g>        how many members the group has (cache.incr)
    taskmq:<name>:group:<g>:<n>    the id of its n-th member

A member's slot comes from ``cache.incr``, which is atomic on Redis, Memcached and the local-memory
cache; on the database and file caches two monitors that record the same group at the same
instant can take one slot, and one member then drops out of the group (its own record stays).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import Any

from django.core.cache import caches

from ..conf import Settings
from ..exceptions import ConfigError, UnreadableResult
from ..models import Job
from ..envelope import seal_result, verify_result

# What a record keeps of the job, besides its result: enough for a Job that reads like the stored one.
FIELDS = ("id", "func", "task_name", "group", "queue", "state", "error", "cluster", "attempt", "enqueued_at",
          "started_at", "finished_at")


def _cache(settings: Settings) -> Any:
    return caches[settings.cache]


def job_key(settings: Settings, job_id: str) -> str:
    return f"taskmq:{settings.name}:job:{job_id}"


def _group_key(settings: Settings, group: str) -> str:
    return f"taskmq:{settings.name}:group:{hashlib.sha1(group.encode()).hexdigest()}"


def _timeout(cached: Any) -> float | None:
    return None if cached is True else cached  # True: no expiry, as in django-q2


def store(items: Iterable[tuple[Job, str | None, Any]], settings: Settings) -> None:
    """Write the records of finished jobs, given as ``(job, signed result or None, cached option)``."""
    cache = _cache(settings)
    for job, sealed, cached in items:
        timeout = _timeout(cached)
        record = {name: getattr(job, name) for name in FIELDS}
        record["result"] = str(sealed) if sealed is not None else None
        cache.set(job_key(settings, job.id), seal_result(record, settings.name, settings.compress), timeout)
        if job.group:
            base = _group_key(settings, job.group)
            cache.add(base, 0, timeout)
            try:
                slot = cache.incr(base)
            except ValueError:  # the counter expired between add() and incr()
                cache.set(base, 1, timeout)
                slot = 1
            cache.set(f"{base}:{slot}", job.id, timeout)


def _job(package: Any, settings: Settings) -> Job:
    if not isinstance(package, str):
        raise UnreadableResult(f"bad cache entry: a {type(package).__name__}, not a signed record")
    record = verify_result(package, settings.name)
    if not isinstance(record, dict) or "result" not in record:
        raise UnreadableResult(f"bad cache entry: a {type(record).__name__}, not a job record")
    job = Job(result_package=record["result"], **{name: record.get(name) for name in FIELDS})
    setattr(job, "save", _refuse_save)  # a copy of a row that exists: saving it would overwrite the row
    return job


def _refuse_save(*args: Any, **kwargs: Any) -> None:
    raise ConfigError("a cached job record cannot be saved: its job is a row of the job table already (keep the "
                      "result there too with save=True, the default)")


def fetch(job_id: str, settings: Settings) -> Job | None:
    """Return the cached record of ``job_id`` as an unsaved Job, or None when there is none.

    Raises :class:`~django_taskmq.exceptions.UnreadableResult` when it does not verify.
    """
    package = _cache(settings).get(job_key(settings, job_id))
    return None if package is None else _job(package, settings)


def group_ids(group: str, settings: Settings) -> list[str]:
    """Return the ids of the group's cached members, in the order they were recorded."""
    cache = _cache(settings)
    base = _group_key(settings, group)
    count = cache.get(base) or 0
    slots = cache.get_many([f"{base}:{n}" for n in range(1, count + 1)])
    ids = [slots[f"{base}:{n}"] for n in range(1, count + 1) if f"{base}:{n}" in slots]
    return list(dict.fromkeys(ids))  # a job recorded twice (replayed) counts once


def fetch_group(group: str, settings: Settings) -> list[Job]:
    """Return the group's cached records as unsaved Jobs, in enqueue order (by id), as from the database."""
    ids = sorted(group_ids(group, settings))
    keys = [job_key(settings, job_id) for job_id in ids]
    packages = _cache(settings).get_many(keys)
    return [_job(packages[key], settings) for key in keys if key in packages]


def delete(job_ids: Sequence[str], settings: Settings) -> None:
    """Delete the cached records of ``job_ids``."""
    _cache(settings).delete_many([job_key(settings, job_id) for job_id in job_ids])


def delete_group(group: str, settings: Settings) -> None:
    """Delete a group's cached records and its member list."""
    cache = _cache(settings)
    base = _group_key(settings, group)
    count = cache.get(base) or 0
    delete(group_ids(group, settings), settings)
    cache.delete_many([base, *(f"{base}:{n}" for n in range(1, count + 1))])
