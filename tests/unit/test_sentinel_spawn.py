"""How the sentinel forks its children (``processes.fork``), with real processes: a child inherits
the sentinel's objects frozen (``gc.freeze``), so that its garbage collections leave them alone and
do not copy the inherited heap page by page, while the sentinel's own collections go on as before.
"""

from __future__ import annotations

import gc
import multiprocessing

from django_taskmq.cluster import processes


#: An object the project froze (a test freezes it): the garbage collector's generations list it
#: only while it is not frozen.
PROJECT_OBJECT: list = []


def report_frozen(conn) -> None:
    """A child's target: send back how many objects its garbage collector leaves alone, and whether
    :data:`PROJECT_OBJECT` is one of them."""
    conn.send((gc.get_freeze_count(), is_frozen(PROJECT_OBJECT)))
    conn.close()


def is_frozen(obj: object) -> bool:
    """``obj`` (tracked by the garbage collector) is in its permanent generation (gc.freeze)."""
    return not any(o is obj for o in gc.get_objects())


def frozen_in_a_child() -> tuple[int, bool]:
    """Spawn a child as the sentinel spawns its processes; return its ``gc.get_freeze_count()``
    and whether :data:`PROJECT_OBJECT` is frozen there."""
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
    assert frozen_in_a_child()[0] > frozen_before + 1000
    assert gc.get_freeze_count() <= frozen_before  # thawed again (with CPython 3.12.1's own, harmlessly)


def test_what_the_project_froze_itself_stays_frozen_in_the_sentinel():
    gc.freeze()  # as a project may, at start-up
    try:
        assert is_frozen(PROJECT_OBJECT)
        # (Counts cannot tell: forking frees a few frozen objects, in the sentinel too on Python 3.13.)
        assert frozen_in_a_child()[1], "frozen in the child"
        assert is_frozen(PROJECT_OBJECT)  # not thawed by the fork
    finally:
        gc.unfreeze()
