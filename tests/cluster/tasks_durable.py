"""Durable tasks of the test suites (imported by qcluster workers as ``tests.cluster.tasks_durable``).

Every step function logs to the run log (see :func:`tests.cluster.tasks_cluster.log`) when it
runs, so a test counts how many times each step's function ran across the job's runs.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

from django_taskmq import durable

from .tasks_cluster import log


def _logged(tag: str, value: Any = None) -> Any:
    log(f"step:{tag}")
    return value


def _one(x: int) -> int:
    log("step:one")
    return x + 1


def _two(x: int, marker: str) -> int:
    """The first time (no ``marker``): SIGKILL this worker in the middle of the step."""
    log("start:two")
    if not os.path.exists(marker):
        Path(marker).touch()
        os.kill(os.getpid(), signal.SIGKILL)
    log("step:two")
    return x * 10


def _three(x: int) -> int:
    log("step:three")
    return x + 5


@durable(retry={"base": 0.1, "max_delay": 0.5})
def three_steps(ctx, start: int, marker: str) -> list[int]:
    """Three steps; the second kills its worker the first time it runs."""
    a = ctx.step("one", _one, start)
    b = ctx.step("two", _two, a, marker)
    c = ctx.step("three", _three, b)
    return [a, b, c]


def _now(tag: str) -> float:
    log(f"step:{tag} {time.time():.3f}")
    return time.time()


@durable
def sleeper(ctx, seconds: float) -> list[float]:
    """A step, a sleep of ``seconds``, a step; returns the two steps' times."""
    before = ctx.step("before", _now, "before")
    ctx.sleep(seconds)
    after = ctx.step("after", _now, "after")
    return [before, after]


@durable
def approval(ctx, timeout: float | None = None) -> Any:
    """Ask, wait for the signal "approved", then record and return its payload (None: timed out)."""
    ctx.step("asked", _logged, "asked")
    answer = ctx.wait_for("approved", timeout=timeout)
    ctx.step("answered", _logged, f"answered:{answer!r}")
    return answer


@durable
def sleeps_and_waits(ctx, n: int) -> int:
    """Two sleeps and a wait between steps (the soak test)."""
    a = ctx.step("a", _logged, "a", n)
    ctx.sleep(1)
    b = ctx.step("b", _logged, "b", a + 1)
    ctx.sleep(1)
    got = ctx.wait_for("go", timeout=120)
    c = ctx.step("c", _logged, "c", b + (got or 0))
    return c


def _fails_once(marker: str) -> str:
    """Raise the first time (no ``marker``), return the second."""
    log("start:flaky")
    if not os.path.exists(marker):
        Path(marker).touch()
        raise RuntimeError("the step failed this time")
    return "flaky done"


@durable(retry={"base": 0.1, "max_delay": 0.5})
def flaky_second(ctx, marker: str) -> list[Any]:
    """A step, then one that raises the first time: the retry runs only the second again."""
    return [ctx.step("first", _logged, "first", 1), ctx.step("second", _fails_once, marker)]


@durable
def changes_its_steps(ctx) -> int:
    """A step whose argument comes from outside the job (what a code change does), then a sleep of 0 s
    that ends the run, so the job runs again and reaches the step once more."""
    value = ctx.step("only", _logged, "only", int(os.environ.get("TASKMQ_TEST_STEP_ARG", "1")))
    ctx.sleep(0)
    return value


# -- batches: each callback logs its kind and the batch's counts under the batch's id ----------------
def _batch_logged(kind: str, outcome: dict) -> None:
    log(f"{kind} {outcome['total']} {sorted(outcome['counts'].items())}", job_id=outcome["id"])


def on_success(outcome: dict) -> None:
    _batch_logged("on_success", outcome)


def on_finish(outcome: dict) -> None:
    _batch_logged("on_finish", outcome)


def on_discard(outcome: dict) -> None:
    _batch_logged("on_discard", outcome)


def slow_record(n: int, seconds: float = 0.05) -> int:
    """Log, take a moment (so a cluster killed mid-batch holds some jobs), return ``n``."""
    log(f"member {n}")
    time.sleep(seconds)
    return n


@durable
def many_steps(ctx, steps: int) -> int:
    """``steps`` steps that return their index (``benchmarks/durable_steps.py``: the cost of a step)."""
    return sum(ctx.step(f"s{i}", int, i) for i in range(steps))


def _busy(tag: str, seconds: float) -> str:
    log(f"step:{tag}")
    time.sleep(seconds)
    return tag


@durable(timeout=2.5)
def long_sleep_short_runs(ctx, seconds: float, nap: float) -> list[str]:
    """Two steps of ``seconds`` each around a sleep of ``nap``: more than the timeout in all, each
    run well within it."""
    first = ctx.step("first", _busy, "first", seconds)
    ctx.sleep(nap)
    return [first, ctx.step("second", _busy, "second", seconds)]


# -- what holds for jobs holds for durable tasks (tests/cluster/test_durable_holds.py) --------------
def _gated(tag: str, gate: str) -> str:
    """Log ``start:<tag>``, wait for the file ``gate`` (at most a minute), log ``step:<tag>``."""
    from .tasks_cluster import wait_for

    log(f"start:{tag}")
    wait_for(gate, 60)
    log(f"step:{tag}")
    return tag


@durable
def step_sleep_step(ctx, tag: str, seconds: float) -> str:
    """A step, a sleep of ``seconds``, a step: both logged with ``tag``."""
    ctx.step("before", _logged, f"before {tag}")
    ctx.sleep(seconds)
    ctx.step("after", _logged, f"after {tag}")
    return tag


@durable
def gated_second_step(ctx, gate: str) -> list[str]:
    """A step, then one that waits for ``gate``: a stop that comes meanwhile interrupts the second."""
    return [ctx.step("first", _logged, "first", "first"), ctx.step("second", _gated, "second", gate)]


@durable
def sleeps_until(ctx, tag: str, when: float) -> str:
    """A step, a sleep until the epoch ``when`` (the same for several jobs: they wake together), a step."""
    import datetime

    ctx.step("before", _logged, f"before {tag}")
    ctx.sleep_until(datetime.datetime.fromtimestamp(when, tz=datetime.timezone.utc))
    ctx.step("after", _logged, f"after {tag}")
    return tag
