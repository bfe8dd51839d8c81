"""How the sentinel forks its children (``processes.fork``), with real processes: a child inherits
the sentinel's objects frozen (``gc.freeze``), so that its garbage collections leave them alone and
do not copy the inherited heap page by page, while the sentinel's own collections go on as before.
"""

from __future__ import annotations

import gc
import multiprocessing

from django_taskmq.cluster import processes


def report_frozen(conn) -> None:
    """A child's target: send back how many objects its garbage collector leaves alone."""
    conn.send(gc.get_freeze_count())
    conn.close()


def frozen_in_a_child() -> int:
    """Spawn a child as the sentinel spawns its processes; return its ``gc.get_freeze_count()``."""
    parent, child = multiprocessing.Pipe()
    process = processes.fork(multiprocessing.get_context("fork"), report_frozen, (child,), "test-child", [parent])
    try:
        assert parent.poll(30), "the child said nothing"
        return parent.recv()
    finally:
        process.join(30)
        child.close()
        parent.close()
        assert process.exitcode == 0


def test_a_child_inherits_the_sentinels_objects_frozen_and_the_sentinel_keeps_collecting():
    frozen_before = gc.get_freeze_count()
    # Everything the sentinel held at the fork (a Django process: tens of thousands of objects).
    assert frozen_in_a_child() > frozen_before + 1000
    assert gc.get_freeze_count() <= frozen_before  # thawed again (with CPython 3.12.1's own, harmlessly)


def test_what_the_project_froze_itself_stays_frozen_in_the_sentinel():
    gc.freeze()  # as a project may, at start-up
    try:
        frozen = gc.get_freeze_count()
        assert frozen_in_a_child() >= frozen
        assert gc.get_freeze_count() >= frozen  # not thawed by the fork
    finally:
        gc.unfreeze()
