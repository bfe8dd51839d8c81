"""Coalescing keys: one waiting (or running) job per key; a second enqueue returns it instead.

``async_task(..., unique_key="reindex:42")`` makes no second job while the key's job is in one of
the states of ``unique_for`` (by default the states before running: QUEUED, RETRYING); with
``unique_replace`` the waiting job takes the new arguments and time instead (a debounce). The
states are stored with the key, so each key says for itself when it holds.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from .states import JobState

#: The states a job passes before it ends: the only ones a key may hold in.
HOLDABLE = frozenset({JobState.QUEUED, JobState.RETRYING, JobState.RUNNING})
#: ``unique_for`` when not given: the states before running.
DEFAULT_FOR = frozenset(JobState.READY)
#: The states in which a job's arguments and time may still be replaced (it has not started).
REPLACEABLE = frozenset(JobState.READY)
KEY_MAX = 255  # the key table's primary key


class Unique(NamedTuple):
    """A coalescing key of one enqueue: ``key``, the ``states`` it holds in, and ``replace``
    (the waiting job takes the new arguments and time)."""

    key: str
    states: frozenset[JobState] = DEFAULT_FOR
    replace: bool = False

    @property
    def column(self) -> str:
        """The states as the key table stores them: ``"QUEUED,RETRYING"`` (sorted)."""
        return ",".join(sorted(state.value for state in self.states))

    def holds(self, state: str | JobState, stored: str | None = None) -> bool:
        """True when a job in ``state`` keeps the key: in ``stored`` (the key row's states
        column) if given, else in this call's states."""
        value = state.value if isinstance(state, JobState) else state
        if stored is not None:
            return value in stored.split(",")
        return value in {s.value for s in self.states}


def parse_unique(key: object, states: object = None, replace: object = None,
                 error: type[Exception] = ValueError) -> Unique | None:
    """Return the :class:`Unique` of the options ``unique_key``, ``unique_for`` and
    ``unique_replace`` (None without a key); raise ``error`` naming the bad one."""
    if key is None:
        if states is not None or replace is not None:
            raise error("unique_for and unique_replace need a unique_key")
        return None
    if not isinstance(key, str) or not 0 < len(key) <= KEY_MAX:
        raise error(f"unique_key must be a string of 1..{KEY_MAX} characters, got {key!r}")
    if replace is not None and not isinstance(replace, bool):
        raise error(f"unique_replace must be True or False, got {replace!r}")
    return Unique(key, DEFAULT_FOR if states is None else parse_states(states, error), bool(replace))


def parse_states(states: object, error: type[Exception] = ValueError) -> frozenset[JobState]:
    """``unique_for`` as states: an iterable of names among queued, retrying and running (any case)."""
    if isinstance(states, (str, bytes)) or not isinstance(states, Iterable):
        raise error(f"unique_for must be a tuple of state names such as ('queued', 'retrying'), got {states!r}")
    names = sorted(s.value.lower() for s in HOLDABLE)
    out = set()
    for name in states:
        if not isinstance(name, str) or name.upper() not in {s.value for s in HOLDABLE}:
            raise error(f"unique_for may name only {names} (a job's states before it ends), got {name!r}")
        out.add(JobState(name.upper()))
    if not out:
        raise error(f"unique_for must name at least one of {names}")
    return frozenset(out)
