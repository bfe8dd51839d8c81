"""SQL pieces the ORM broker's modules share: placeholders, and state literals taken from the pure
state table (``policy/states.py``), so no query spells a state by hand."""

from __future__ import annotations

from ...policy.states import JobState


def marks(n: int) -> str:
    """Return ``n`` placeholders: ``%s, %s, %s``."""
    return ", ".join(["%s"] * n)


def literal(*states: JobState) -> str:
    """Return the SQL list of ``states``: ``('QUEUED', 'RETRYING')``."""
    return "(" + ", ".join(f"'{state.value}'" for state in sorted(states)) + ")"


READY_SQL = literal(*JobState.READY)
RUNNING = f"'{JobState.RUNNING.value}'"
