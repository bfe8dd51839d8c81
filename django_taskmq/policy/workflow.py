"""Workflows as pure rules: a graph's validation, what an ended step does to each dependent, and
the state of a whole workflow from the states of its steps.

A step waits (``WAITING``) until each of its dependencies is *satisfied*: by a success, or, for a
step built with ``run_on_failure=True``, by any end. A dependency that ends otherwise cancels the
dependent, which then ends too and passes the same rule on, so failure propagates transitively.
The database keeps the counts (see ``brokers/orm/workflows.py``); this module only decides.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator, Mapping, Sequence

from .states import JobState

#: The ends of a step that cancel its dependents (unless they run on failure).
UNSUCCESSFUL = frozenset(JobState.FINAL) - {JobState.SUCCEEDED}
NAME_MAX = 100  # the step table's name column
# A workflow's idempotency key is stored in the job keys' table under this prefix: its own
# namespace, so that a job and a workflow given the same key do not take each other's.
KEY_PREFIX = "workflow:"
KEY_MAX = 255 - len(KEY_PREFIX)  # the key table's primary key


class WorkflowState(str, enum.Enum):
    """The state of a workflow as stored in the database."""

    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"

    def __str__(self) -> str:
        return self.value


class Effect(str, enum.Enum):
    """What the end of a step does to one of its dependents."""

    SATISFY = "SATISFY"  # one dependency fewer to wait for
    CANCEL = "CANCEL"  # the dependent ends CANCELLED, naming the step


def effect(upstream_state: JobState | str, run_on_failure: bool) -> Effect:
    """Return what ``upstream_state`` (a final state) does to a dependent."""
    state = JobState(upstream_state)
    if state not in JobState.FINAL:
        raise ValueError(f"a step in state {state.value} has not ended")
    if state is JobState.SUCCEEDED or run_on_failure:
        return Effect.SATISFY
    return Effect.CANCEL


def cancel_reason(step_name: str, state: JobState | str) -> str:
    """The error a dependent cancelled by propagation carries."""
    return f"upstream step {step_name!r} ended {JobState(state).value}"


def outcome(step_states: Iterable[JobState | str], cancelled: bool = False) -> WorkflowState:
    """The state of a workflow whose steps are in ``step_states``; ``cancelled``: someone called
    ``cancel_workflow``. RUNNING while a step has not ended; then CANCELLED if it was cancelled,
    SUCCEEDED if every step succeeded, FAILED otherwise (a cleanup step that ran after a failure
    does not make the workflow a success)."""
    states = [JobState(s) for s in step_states]
    if any(s not in JobState.FINAL for s in states):
        return WorkflowState.RUNNING
    if cancelled:
        return WorkflowState.CANCELLED
    if all(s is JobState.SUCCEEDED for s in states):
        return WorkflowState.SUCCEEDED
    return WorkflowState.FAILED


def check_name(name: object, taken: Iterable[str], error: type[Exception] = ValueError) -> str:
    """Return ``name`` if it can name a new step of a workflow whose steps are ``taken``."""
    if not isinstance(name, str) or not 0 < len(name) <= NAME_MAX:
        raise error(f"a step's name must be a string of 1..{NAME_MAX} characters, got {name!r}")
    if name in taken:
        raise error(f"the workflow already has a step named {name!r}")
    return name


def check_after(after: object, error: type[Exception] = ValueError) -> tuple[str, ...]:
    """Return the dependencies ``after`` (step names) as a tuple; raise ``error`` for a value that
    is not a list of names, or names one twice. A name may be of a step added later: the whole
    graph is checked by :func:`order` when the workflow is enqueued."""
    if after is None:
        return ()
    if isinstance(after, str) or not isinstance(after, Iterable):
        raise error(f"after must be a list of step names, got {after!r}")
    names = tuple(after)
    bad = [n for n in names if not isinstance(n, str)]
    if bad:
        raise error(f"after must name steps (strings), got {bad}")
    if len(set(names)) != len(names):
        raise error(f"after names a step twice: {list(names)}")
    return names


def order(graph: Mapping[str, Sequence[str]], error: type[Exception] = ValueError) -> list[str]:
    """Return the steps of ``graph`` (step -> its dependencies) so that each comes after its
    dependencies; raise ``error`` for an empty graph, an unknown dependency or a cycle (named)."""
    if not graph:
        raise error("a workflow needs at least one step")
    for step, deps in graph.items():
        unknown = [d for d in deps if d not in graph]
        if unknown:
            raise error(f"step {step!r} waits for unknown step(s) {unknown}")
    placed: list[str] = []
    state: dict[str, int] = {}  # 1: being visited, 2: placed
    stack: list[tuple[str, Iterator[str]]]
    for root in graph:
        if state.get(root) == 2:
            continue
        stack = [(root, iter(graph[root]))]
        state[root] = 1
        while stack:
            step, pending = stack[-1]
            dep = next(pending, None)
            if dep is None:
                stack.pop()
                state[step] = 2
                placed.append(step)
            elif state.get(dep) == 1:
                path = [s for s, _ in stack]
                cycle = path[path.index(dep):] + [dep]
                raise error(f"the workflow has a cycle: {' -> '.join(cycle)} (each waits for the next)")
            elif state.get(dep) is None:
                state[dep] = 1
                stack.append((dep, iter(graph[dep])))
    return placed
