"""django-q2's ``Q_CLUSTER`` read as ``TASKMQ``: which key becomes which, and which have no equivalent.

A leaf (it imports only the exceptions): ``conf`` reads the settings through :func:`translate` when
``TASKMQ`` is absent and ``Q_CLUSTER`` present, the system checks warn about every key it drops
(``taskmq.W002``), and ``manage.py qconfig --from-q-cluster`` prints the result.

Values are copied as they are; ``conf.from_mapping`` checks them afterwards under their ``TASKMQ``
names. Nothing is dropped silently: :func:`translate` returns a note for every key it does not
carry over, and for every value it had to change.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..exceptions import ConfigError

SETTING = "Q_CLUSTER"
UNLIMITED = 2_147_483_647  # conf.COUNTER_MAX: the largest max_deliveries the job table holds

# Q_CLUSTER key -> TASKMQ key, for the keys that mean the same thing.
RENAMED = {
    "name": "name",
    "workers": "workers",
    "timeout": "timeout",
    "retry": "lease",
    "max_attempts": "max_deliveries",
    "recycle": "recycle",
    "compress": "compress",
    "save_limit": "save_limit",
    "ack_failures": "ack_failures",
    "catch_up": "catch_up",
    "queue_limit": "queue_limit",
    "poll": "poll",
    "cache": "cache",
    "cached": "cached",
    "label": "label",
    "max_rss": "max_rss",
    "orm": "database",
    "sync": "sync",
    "scheduler_interval": "scheduler_interval",
}

_BROKER = "django_taskmq's broker is the Django database (TASKMQ['database']); no other broker is used"

# Q_CLUSTER keys with no equivalent, and why.
DROPPED = {
    "redis": _BROKER,
    "django_redis": _BROKER,
    "iron_mq": _BROKER,
    "sqs": _BROKER,
    "mongo": _BROKER,
    "mongo_db": _BROKER,
    "broker_class": _BROKER,
    "has_replica": _BROKER,
    "bulk": "a cluster claims as many messages as its sentinel has room for (queue_limit) in one statement",
    "guard_cycle": "the sentinel wakes on events (pipes, process exits); TASKMQ['guard_interval'] only "
                   "bounds how often it checks timeouts",
    "cpu_affinity": "no per-worker CPU affinity; pin the whole qcluster process (taskset) if you need it",
    "log_level": "configure the 'django_taskmq' logger in LOGGING",
    "save_limit_per": "save_limit counts every success, whatever its group, name or function",
    "scheduler": "the scheduler cannot be switched off; pause schedules instead (Schedule.paused, the admin)",
    "cluster_name": "cluster names are queues: run 'qcluster -Q <queue>' to serve some of them",
    "time_zone": "schedules use the project's TIME_ZONE",
    "testing": "a django-q2 internal",
}


def _where(key: str) -> str:
    return f"{SETTING}[{key!r}]"


def _daemonize(value: Any) -> str | None:
    if value is False:
        return None  # what django_taskmq does anyway
    return "workers are never daemonic processes (a task may start child processes); only False has an equivalent"


def translate(q_cluster: Any) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """Return ``(TASKMQ dict, notes)`` for a ``Q_CLUSTER`` dict.

    ``notes`` holds ``(where, reason)`` for every key that is not carried over and every value that
    had to change, ``where`` naming the key (``"Q_CLUSTER['redis']"``); the system checks turn each
    into a warning.
    """
    if not isinstance(q_cluster, Mapping):
        raise ConfigError(f"{SETTING} must be a dict, got {type(q_cluster).__name__}")
    taskmq: dict[str, Any] = {}
    notes: list[tuple[str, str]] = []
    for key, value in q_cluster.items():
        if key in RENAMED:
            _carry(key, value, taskmq, notes)
        elif key == "ALT_CLUSTERS":
            _alt_clusters(value, taskmq, notes)
        elif key == "error_reporter":
            _error_reporter(value, taskmq, notes)
        elif key == "daemonize_workers":
            reason = _daemonize(value)
            if reason:
                notes.append((_where(key), reason))
        elif key in DROPPED:
            notes.append((_where(key), DROPPED[key]))
        else:
            notes.append((_where(key), "not a django-q2 setting django_taskmq knows"))
    return taskmq, notes


def _carry(key: str, value: Any, taskmq: dict[str, Any], notes: list[tuple[str, str]]) -> None:
    target = RENAMED[key]
    if key == "workers" and not value:
        return  # django-q2's "not set": the CPU count, as here
    if key == "max_attempts" and value == 0 and not isinstance(value, bool):
        value = UNLIMITED  # django-q2's "retry for ever"
    if key == "save_limit" and value == -1 and not isinstance(value, bool):
        notes.append((_where(key), "-1 (keep no successes) has no equivalent: a success stays a job row until pruned; "
                           "read as 1, the newest success is kept (the 'save' option keeps no result)"))
        value = 1
    taskmq[target] = value


SENTRY_REPORTER = "django_taskmq.contrib.sentry.report"


def _error_reporter(value: Any, taskmq: dict[str, Any], notes: list[tuple[str, str]]) -> None:
    """django-q2's ``{'sentry': {'dsn': ...}}`` (the django-q-sentry plugin) becomes the Sentry reporter;
    the plugin also initialised sentry-sdk, which the project now does itself."""
    if isinstance(value, Mapping) and "sentry" in value:
        taskmq["error_reporter"] = SENTRY_REPORTER
        notes.append((f"{_where('error_reporter')}['sentry']",
                      f"read as TASKMQ['error_reporter'] = {SENTRY_REPORTER!r}; its options are not carried over: "
                      "call sentry_sdk.init(dsn=...) in your settings, as django-q-sentry did with them"))
    others = sorted(str(k) for k in value) if isinstance(value, Mapping) else [repr(value)]
    for name in (n for n in others if n != "sentry"):
        notes.append((f"{_where('error_reporter')}[{name!r}]" if isinstance(value, Mapping) else _where("error_reporter"),
                      "only the 'sentry' reporter has an equivalent; name your own callable (exc, job) in "
                      "TASKMQ['error_reporter']"))


def _alt_clusters(value: Any, taskmq: dict[str, Any], notes: list[tuple[str, str]]) -> None:
    """ALT_CLUSTERS names become queues; their own settings have no per-queue equivalent."""
    if not isinstance(value, Mapping) or not value:
        notes.append((_where("ALT_CLUSTERS"), f"must be a dict of cluster name -> settings, got {value!r}; ignored"))
        return
    queues: dict[str, Any] = {"default": {"weight": 1}}
    for name, conf in value.items():
        queues[name] = {"weight": 1}
        for option in (conf if isinstance(conf, Mapping) else {}):
            notes.append((f"{_where('ALT_CLUSTERS')}[{name!r}][{option!r}]",
                          f"queues have no settings of their own but weight, concurrency and rate_limit; "
                          f"queue {name!r} uses the cluster-wide value"))
    taskmq["queues"] = queues
