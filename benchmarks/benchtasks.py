"""The task both systems run: ``benchtasks.noop``.

One module shared by both projects, so the measured work is identical. A job enqueued
with a ``tag`` appends ``"<tag> <time.time()>"`` to a per-process file in
``BENCH_MARKS_DIR`` at the moment it starts: that is how the latency workloads learn when
a job started without depending on what each system stores (django-q2 prunes successes
beyond ``save_limit`` and its ``Task.started`` is the enqueue time). Untagged jobs do
nothing at all.
"""

from __future__ import annotations

import os
import time

_mark_file = None
_mark_pid = None


def noop(tag=None):
    if tag is not None:
        _mark(tag, time.time())


def _mark(tag, started):
    global _mark_file, _mark_pid
    directory = os.environ.get("BENCH_MARKS_DIR")
    if not directory:
        return
    # Reopen after a fork: two processes must never share one buffered file object.
    if _mark_pid != os.getpid():
        _mark_file = open(os.path.join(directory, f"marks-{os.getpid()}.txt"), "a", buffering=1)
        _mark_pid = os.getpid()
    _mark_file.write(f"{tag} {started!r}\n")


def item(i):
    """A step of ``fan_in.py``'s fan-in (both systems): returns its argument."""
    return i


def merge_upstream():
    """The fan-in step of ``fan_in.py`` on django_taskmq: reads its upstream results as a task does."""
    from django_taskmq import current_job

    results = current_job().upstream
    return {"count": len(results), "sum": sum(results.values())}
