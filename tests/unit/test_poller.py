"""The sentinel's poller (``cluster.poller.Poller``) against real pipes and a real child process:
it reports what :func:`multiprocessing.connection.wait` reports, across changes of the handle set."""

from __future__ import annotations

import multiprocessing
import time
from multiprocessing.connection import wait

from django_taskmq.cluster.poller import Poller


def test_the_poller_reports_readable_pipes_closed_peers_and_dead_children_as_wait_does():
    poller = Poller()
    child = multiprocessing.get_context("fork").Process(target=time.sleep, args=(0.5,))
    child.start()  # before the pipes: it must not hold copies of their ends
    (a, a_peer), (b, b_peer) = multiprocessing.Pipe(), multiprocessing.Pipe()
    handles = [a, b, child.sentinel]
    try:
        started = time.monotonic()
        assert poller.wait(handles, timeout=0.05) == [] == wait(handles, timeout=0)
        assert time.monotonic() - started >= 0.045  # it waited out its timeout (clock granularity aside)
        b_peer.send_bytes(b"x")
        assert poller.wait(handles, timeout=1) == [b] == wait(handles, timeout=0)
        a_peer.close()  # end of file counts as readable
        assert set(poller.wait(handles, timeout=1)) == {a, b} == set(wait(handles, timeout=0))
        # The set changes: a goes, the child stays; the child's death wakes the wait.
        handles = [b, child.sentinel]
        b.recv_bytes()
        assert poller.wait(handles, timeout=5) == [child.sentinel]
        child.join()
        # A new pipe may reuse a closed one's descriptor: the poller follows the handles given.
        a.close()
        (c, c_peer) = multiprocessing.Pipe()
        handles = [b, c]
        assert poller.wait(handles, timeout=0) == []
        c_peer.send_bytes(b"y")
        assert poller.wait(handles, timeout=1) == [c]
    finally:
        child.join(5)
