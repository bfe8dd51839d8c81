"""The result pipe (sentinel -> monitor): frames arrive whole and in order, a full pipe never
blocks the writer, and a closed writer reads as the end."""

import os
import queue
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from django_taskmq.cluster.result_pipe import ResultPipe


@pytest.fixture
def pipe():
    p = ResultPipe()
    yield p
    p.close()


def test_objects_come_out_as_they_went_in(pipe):
    pipe.put([b"a", b"b"])
    pipe.put(None)
    assert pipe.get(timeout=1) == [b"a", b"b"]
    assert pipe.get(timeout=1) is None


def test_get_times_out_with_empty(pipe):
    started = time.monotonic()
    with pytest.raises(queue.Empty):
        pipe.get(timeout=0.05)
    assert time.monotonic() - started >= 0.04
    with pytest.raises(queue.Empty):
        pipe.get(block=False)


def test_a_full_pipe_keeps_the_rest_pending_without_blocking(pipe):
    started = time.monotonic()
    for i in range(100):  # 1 MB: far more than a pipe holds
        pipe.put([i.to_bytes(2, "big") * 5_000])
    assert time.monotonic() - started < 5  # a blocking write would hang here for ever
    assert pipe.pending > 0
    assert pipe.flush() is False
    got = []
    while len(got) < 100:
        got.append(pipe.get(timeout=1))
        pipe.flush()  # the sentinel's turn: what now fits goes
    assert [g[0][:2] for g in got] == [i.to_bytes(2, "big") for i in range(100)]
    assert pipe.pending == 0


def test_drain_writes_everything_once_the_reader_reads(pipe):
    for _ in range(40):
        pipe.put([b"x" * 10_000])
    assert pipe.pending
    assert pipe.drain(timeout=0.05) is False  # nobody reads: it gives up in time
    pid = os.fork()
    if pid == 0:  # a reader, as the monitor is
        try:
            pipe.close_writer()
            for _ in range(40):
                pipe.get(timeout=5)
        finally:
            os._exit(0)
    try:
        assert pipe.drain(timeout=10) is True
    finally:
        os.waitpid(pid, 0)


def test_the_writer_closed_reads_as_the_end_after_what_it_wrote(pipe):
    pipe.put("last")
    pipe.close_writer()
    assert pipe.get(timeout=1) == "last"
    with pytest.raises(EOFError):
        pipe.get(timeout=1)


def test_a_reader_gone_drops_what_is_pending():
    pipe = ResultPipe()
    pipe.close_reader()
    pipe.put([b"x"])  # EPIPE (Python ignores SIGPIPE): nobody can read it any more
    assert pipe.pending == 0 and pipe.flush() is True
    pipe.close()
    pipe.close()  # closing twice touches no other descriptor


@settings(max_examples=50, deadline=None)
@given(st.lists(st.binary(max_size=2000), max_size=30), st.integers(min_value=1, max_value=4096))
def test_frames_split_anywhere_reassemble(items, chunk):
    """However the bytes arrive in the reader (partial reads), each object comes out whole."""
    writer = ResultPipe()
    for item in items:  # at most ~60 kB: all of it fits in the pipe
        writer.put(item)
    assert writer.pending == 0
    writer.close_writer()
    data = b""
    while part := os.read(writer.reader, 1 << 16):
        data += part
    writer.close()
    reader = ResultPipe()
    try:
        got = []
        for at in range(0, len(data), chunk):
            reader._received += data[at:at + chunk]
            while (obj := reader._frame()) is not _nothing():
                got.append(obj)
        assert got == items
    finally:
        reader.close()


def _nothing():
    from django_taskmq.cluster import result_pipe

    return result_pipe._NOTHING
