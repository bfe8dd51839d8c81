"""The ``TASKMQ`` settings dict, read once into a frozen, validated :class:`Settings`.

Without ``TASKMQ``, django-q2's ``Q_CLUSTER`` is read instead, translated by :mod:`.compat.q_cluster`.

Nothing here reads ``django.conf.settings`` at import time; :func:`get_settings` reads it on first
use and is reset when a test overrides ``TASKMQ``.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from . import encryption
from .compat import q_cluster
from .exceptions import ConfigError
from .policy.backoff import Retry
from .policy.flow import Rate, check_limit, parse_rate
from .policy import retention as retention_policy

SETTING = "TASKMQ"
MIB = 1024 * 1024
COUNTER_MAX = 2_147_483_647  # the largest value of the job table's counter columns on every engine


@dataclass(frozen=True, kw_only=True)
class QueueConfig:
    """One queue's configuration: its weight inside a priority band, and its flow limits.

    ``concurrency`` caps how many of its jobs run at once across all clusters; ``rate_limit``
    spreads its starts (see ``policy/flow.py``). None: no limit.
    """

    weight: int = 1
    concurrency: int | None = None
    rate_limit: Rate | None = None


#: Seconds after which a cluster's PostgreSQL connection whose far side went silent fails (see
#: ``TASKMQ['dead_connection_timeout']`` and ``policy/connections.py``).
DEAD_CONNECTION_TIMEOUT = 30.0
MAX_THREADS = 256  # per worker process; more is a mistake, not a configuration
MAX_PREFETCH = 1000


#: Argument names masked wherever arguments are shown or sent (``TASKMQ['redact']``), compared
#: case-insensitively: an argument whose name contains one of them is masked.
DEFAULT_REDACT = frozenset({"password", "passwd", "token", "secret", "authorization", "api_key", "apikey",
                            "access_key", "private_key", "credential", "cookie", "session", "ssn", "card_number",
                            "cvv"})


def _default_workers() -> int:
    return os.cpu_count() or 1


@dataclass(frozen=True, kw_only=True)
class Settings:
    """Validated ``TASKMQ`` settings. See ``docs/settings.rst`` for each key."""

    name: str = "default"
    workers: int = field(default_factory=_default_workers)
    threads: int = 1
    prefetch: int = 4
    timeout: float | None = None
    lease: float = 60.0
    max_deliveries: int = 5
    ack_failures: bool = False
    durable_outcomes: bool = True
    retry: Retry = field(default_factory=Retry)
    queue_limit: int | None = None
    max_yields: int = 100
    idempotency_ttl: float = 86400.0
    queues: Mapping[str, QueueConfig] = field(default_factory=lambda: {"default": QueueConfig()})
    default_queue: str = "default"
    compress: bool = False
    save_limit: int = 250
    poll: float = 0.25
    database: str = "default"
    sync: bool = False
    recycle: int = 500
    max_rss: int | None = None
    catch_up: bool = True
    scheduler_interval: float = 10.0
    guard_interval: float = 0.1
    max_package_size: int | None = MIB * 10
    max_result_size: int | None = MIB * 10
    task_modules: tuple[str, ...] | None = None
    metrics_token: str | None = None
    health_port: int | None = None
    retention: Mapping[str, float | None] = field(default_factory=lambda: dict(retention_policy.DEFAULTS))
    cache: str = "default"
    cached: bool | float = False
    label: str | None = None
    prepared_statements: bool | str = True
    listen_database: str | None = None
    dead_connection_timeout: float | None = DEAD_CONNECTION_TIMEOUT
    stop_timeout: float | None = 25.0
    cancel_grace: float = 5.0
    clock_skew_warning: float = 5.0
    error_reporter: str | None = None
    opentelemetry: bool = False
    encryption_keys: tuple[str, ...] = ()
    encrypt_all: bool = False
    redact: frozenset[str] = DEFAULT_REDACT

    @functools.cached_property
    def keyring(self) -> encryption.Keyring:
        """The keys of ``encryption_keys``: the first encrypts, every one decrypts."""
        return encryption.Keyring(self.encryption_keys)

    @property
    def effective_queue_limit(self) -> int:
        """Return how many reserved-but-unstarted tasks a cluster may hold."""
        return self.queue_limit if self.queue_limit is not None else max(200, self.workers * 200)

    def check_queue(self, queue: object) -> str:
        """Return ``queue`` if it is one of ``TASKMQ['queues']``; else raise :class:`ConfigError`."""
        if not isinstance(queue, str) or queue not in self.queues:
            raise ConfigError(f"unknown queue {queue!r}: it is not in TASKMQ['queues'] {sorted(self.queues)}; add it there")
        return queue

    def queue_caps(self) -> dict[str, int]:
        """Return queue name -> concurrency cap, for the queues that have one."""
        return {name: q.concurrency for name, q in self.queues.items() if q.concurrency is not None}

    def queue_rates(self) -> dict[str, Rate]:
        """Return queue name -> rate limit, for the queues that have one."""
        return {name: q.rate_limit for name, q in self.queues.items() if q.rate_limit is not None}

    def weights(self) -> dict[str, int]:
        """Return queue name -> weight."""
        return {name: q.weight for name, q in self.queues.items()}


def _fail(key: str, reason: str) -> ConfigError:
    return ConfigError(f"{SETTING}[{key!r}] {reason}")


def _number(key: str, value: Any, *, minimum: float = 0, strict: bool = False, integer: bool = False,
            optional: bool = False, maximum: float | None = None) -> Any:
    if value is None and optional:
        return None
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds):
        kind = "an integer" if integer else "a number"
        raise _fail(key, f"must be {kind}, got {value!r}")
    if not math.isfinite(value):
        raise _fail(key, f"must be a finite number, got {value!r}")
    if value < minimum or (strict and value == minimum):
        raise _fail(key, f"must be {'>' if strict else '>='} {minimum}, got {value!r}")
    if maximum is not None and value > maximum:
        raise _fail(key, f"must be <= {maximum}, got {value!r}")
    return value


def _flag(key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise _fail(key, f"must be True or False, got {value!r}")
    return value


def _prepared(key: str, value: Any) -> bool | str:
    if value == "always" or isinstance(value, bool):
        return value
    raise _fail(key, f"must be True, False or 'always', got {value!r}")


def _name(key: str, value: Any) -> str:
    if not isinstance(value, str) or not value or len(value) > 100:
        raise _fail(key, f"must be a non-empty string of at most 100 characters, got {value!r}")
    return value


#: The longest cluster name (``TASKMQ['name']``, ``qcluster -n``): ``Cluster.name`` and ``Job.cluster`` hold it.
MAX_CLUSTER_NAME = 100


def cluster_name_problem(value: Any) -> str | None:
    """What is wrong with ``value`` as a cluster's name (``TASKMQ['name']`` or ``qcluster -n``), or None.

    The name is stored whole (heartbeat, ``Job.cluster``) and printed in log lines: at most
    :data:`MAX_CLUSTER_NAME` characters, none of them a control character (a newline would forge log lines).
    """
    if not isinstance(value, str) or not value:
        return f"must be a non-empty string of at most {MAX_CLUSTER_NAME} characters, got {value!r}"
    if len(value) > MAX_CLUSTER_NAME:
        return f"must be at most {MAX_CLUSTER_NAME} characters, got {len(value)}"
    if not value.isprintable():
        return f"must be printable characters only (no newline, tab or control character), got {value!r}"
    return None


def _cluster_name(key: str, value: Any) -> str:
    problem = cluster_name_problem(value)
    if problem:
        raise _fail(key, problem)
    return value


def _queues(value: Any) -> dict[str, QueueConfig]:
    if not isinstance(value, Mapping) or not value:
        raise _fail("queues", f"must be a non-empty dict of name -> {{'weight': int}}, got {value!r}")
    queues = {}
    for name, conf in value.items():
        if not isinstance(name, str) or not name or len(name) > 100:
            raise _fail("queues", f"queue names must be non-empty strings of at most 100 characters, got {name!r}")
        if conf is None:
            conf = {}
        if not isinstance(conf, Mapping) or set(conf) - {"weight", "concurrency", "rate_limit"}:
            raise _fail("queues", f"entry {name!r} must be a dict of 'weight', 'concurrency' and 'rate_limit', "
                                  f"got {conf!r}")
        weight = conf.get("weight", 1)
        if isinstance(weight, bool) or not isinstance(weight, int) or weight < 1:
            raise _fail("queues", f"weight of queue {name!r} must be an integer >= 1, got {weight!r}")
        concurrency = rate = None
        try:
            if conf.get("concurrency") is not None:
                concurrency = check_limit(conf["concurrency"], f"concurrency of queue {name!r}")
            if conf.get("rate_limit") is not None:
                rate = parse_rate(conf["rate_limit"], f"rate_limit of queue {name!r}")
        except ConfigError as exc:
            raise _fail("queues", str(exc)) from None
        queues[name] = QueueConfig(weight=weight, concurrency=concurrency, rate_limit=rate)
    return queues


def _modules(key: str, value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise _fail(key, f"must be a list of module prefixes like ['myproject', 'billing.tasks'], got {value!r}")
    for prefix in value:
        parts = prefix.split(".") if isinstance(prefix, str) else [""]
        if not all(part.isidentifier() for part in parts):
            raise _fail(key, f"entries must be dotted module names, got {prefix!r}")
    return tuple(value)


def _token(key: str, value: Any) -> str | None:
    if value is not None and (not isinstance(value, str) or len(value) < 16):
        raise _fail(key, "must be a string of at least 16 characters (a bearer token), or None")
    return value


def _cached(key: str, value: Any) -> bool | float:
    if isinstance(value, bool):
        return value
    return _number(key, value, strict=True)


def _label(key: str, value: Any) -> str | None:
    return None if value is None else _name(key, value)


def _retention(value: Any) -> dict[str, float | None]:
    if not isinstance(value, Mapping):
        raise _fail("retention", f"must be a dict of seconds per final state, got {value!r}")
    unknown = sorted(set(value) - set(retention_policy.STATES))
    if unknown:
        raise _fail("retention", f"has unknown key(s) {unknown}; known: {list(retention_policy.STATES)}")
    for state, seconds in value.items():
        if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, (int, float))
                                    or not math.isfinite(seconds) or seconds <= 0):
            raise ConfigError(f"{SETTING}['retention'][{state!r}] must be a number of seconds > 0, or None "
                              f"(keep for ever), got {seconds!r}")
    return retention_policy.merged(value)


def _dotted(key: str, value: Any) -> str | None:
    """A dotted path to a callable, or None; importing it is the system checks' part (it may need apps)."""
    if value is None:
        return None
    if not isinstance(value, str) or not all(part.isidentifier() for part in value.split(".")) or "." not in value:
        raise _fail(key, f"must be a dotted path to a callable like 'django_taskmq.contrib.sentry.report', "
                         f"got {value!r}")
    return value


def _keys(key: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise _fail(key, f"must be a list of keys (manage.py qkey prints one), got {type(value).__name__}")
    ids = []
    for index, item in enumerate(value):
        try:
            ids.append(encryption.key_id(encryption.decode_key(item)))
        except ValueError as exc:  # the key itself is never put in the message
            raise _fail(key, f"entry {index}: {exc}") from None
    if len(set(ids)) != len(ids):
        raise _fail(key, "lists the same key twice")
    if value:
        try:
            import cryptography  # noqa: F401
        except ImportError:
            raise _fail(key, "needs the cryptography package: pip install 'django-taskmq[crypto]'") from None
    return tuple(value)


def _redact(key: str, value: Any) -> frozenset[str]:
    if isinstance(value, str) or not isinstance(value, (list, tuple, set, frozenset)):
        raise _fail(key, f"must be a list of argument names, got {value!r}")
    if not all(isinstance(name, str) and name for name in value):
        raise _fail(key, f"entries must be non-empty strings, got {value!r}")
    return frozenset(name.lower() for name in value)


def _retry(value: Any) -> Retry:
    if isinstance(value, Retry):
        return value
    if isinstance(value, Mapping):
        try:
            return Retry.from_dict(value)
        except ConfigError as exc:
            raise _fail("retry", str(exc)) from None
    raise _fail("retry", f"must be a Retry or a dict of its arguments, got {value!r}")


_VALIDATORS = {
    "name": _cluster_name,
    "workers": lambda k, v: _number(k, v, minimum=1, integer=True),
    "threads": lambda k, v: _number(k, v, minimum=1, integer=True, maximum=MAX_THREADS),
    "prefetch": lambda k, v: _number(k, v, integer=True, maximum=MAX_PREFETCH),
    "timeout": lambda k, v: _number(k, v, strict=True, optional=True),
    "lease": lambda k, v: _number(k, v, minimum=1),
    "max_deliveries": lambda k, v: _number(k, v, minimum=1, integer=True, maximum=COUNTER_MAX),
    "ack_failures": _flag,
    "durable_outcomes": _flag,
    "retry": lambda k, v: _retry(v),
    "queue_limit": lambda k, v: _number(k, v, minimum=1, integer=True, optional=True),
    "max_yields": lambda k, v: _number(k, v, integer=True, maximum=COUNTER_MAX),
    "idempotency_ttl": lambda k, v: _number(k, v, strict=True),
    "queues": lambda k, v: _queues(v),
    "default_queue": _name,
    "compress": _flag,
    "save_limit": lambda k, v: _number(k, v, integer=True),
    "poll": lambda k, v: _number(k, v, strict=True),
    "database": _name,
    "sync": _flag,
    "recycle": lambda k, v: _number(k, v, minimum=1, integer=True),
    "max_rss": lambda k, v: _number(k, v, minimum=1, integer=True, optional=True),
    "catch_up": _flag,
    "scheduler_interval": lambda k, v: _number(k, v, strict=True),
    "guard_interval": lambda k, v: _number(k, v, strict=True),
    "max_package_size": lambda k, v: _number(k, v, minimum=1, integer=True, optional=True),
    "max_result_size": lambda k, v: _number(k, v, minimum=1, integer=True, optional=True),
    "task_modules": _modules,
    "metrics_token": _token,
    "health_port": lambda k, v: _number(k, v, minimum=1, maximum=65535, integer=True, optional=True),
    "retention": lambda k, v: _retention(v),
    "cache": _name,
    "cached": _cached,
    "label": _label,
    "prepared_statements": _prepared,
    "listen_database": _label,
    # At least 6 s: keepalive probes count whole seconds (policy/connections.py keepalive_options).
    "dead_connection_timeout": lambda k, v: _number(k, v, minimum=6, optional=True),
    "stop_timeout": lambda k, v: _number(k, v, optional=True),
    "cancel_grace": lambda k, v: _number(k, v),
    "clock_skew_warning": lambda k, v: _number(k, v, strict=True),
    "error_reporter": _dotted,
    "opentelemetry": _flag,
    "encryption_keys": _keys,
    "encrypt_all": _flag,
    "redact": _redact,
}
assert set(_VALIDATORS) == {f.name for f in fields(Settings)}


def from_mapping(mapping: Mapping[str, Any] | None) -> Settings:
    """Return validated :class:`Settings` for a ``TASKMQ`` dict; raise :class:`ConfigError` naming the key."""
    if mapping is None:
        mapping = {}
    if not isinstance(mapping, Mapping):
        raise ConfigError(f"{SETTING} must be a dict, got {type(mapping).__name__}")
    unknown = sorted(set(mapping) - set(_VALIDATORS))
    if unknown:
        raise ConfigError(f"{SETTING} has unknown key(s): {', '.join(map(repr, unknown))}")
    values = {key: _VALIDATORS[key](key, value) for key, value in mapping.items()}
    result = Settings(**values)
    if result.default_queue not in result.queues:
        raise _fail("default_queue", f"{result.default_queue!r} is not one of TASKMQ['queues'] {sorted(result.queues)}")
    if result.encrypt_all and not result.encryption_keys:
        raise _fail("encrypt_all", "is True but TASKMQ['encryption_keys'] is empty: list a key (manage.py qkey)")
    return result


def read(django_settings: Any) -> Settings:
    """Return validated settings from ``TASKMQ``, or, when it is absent, from django-q2's ``Q_CLUSTER``.

    ``TASKMQ`` wins when both exist. The keys of ``Q_CLUSTER`` that have no equivalent are left out
    (the system checks warn about each, see :mod:`.compat.q_cluster`).
    """
    mapping = getattr(django_settings, SETTING, None)
    if mapping is None and getattr(django_settings, q_cluster.SETTING, None) is not None:
        translated, _ = q_cluster.translate(getattr(django_settings, q_cluster.SETTING))
        try:
            return from_mapping(translated)
        except ConfigError as exc:
            raise ConfigError(f"{exc} (TASKMQ is read from Q_CLUSTER: see manage.py qconfig --from-q-cluster)") from None
    return from_mapping(mapping)


@functools.cache
def get_settings() -> Settings:
    """Return the project's validated settings (read once, reset on ``setting_changed``)."""
    from django.conf import settings

    return read(settings)


def reset_settings(**kwargs: Any) -> None:
    """Forget the cached settings (connected to Django's ``setting_changed``)."""
    if kwargs.get("setting") in (None, SETTING, q_cluster.SETTING, "SECRET_KEY", "SECRET_KEY_FALLBACKS"):
        get_settings.cache_clear()
