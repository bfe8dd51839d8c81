"""Stop requests from signals (``Sentinel._on_signal``), in this process with real signals: a burst
of one kind is one request, a later one or the other kind a second (the hard stop)."""

from __future__ import annotations

import os
import signal
import time

import pytest

from django_taskmq.cluster import sentinel as sentinel_module
from django_taskmq.cluster.sentinel import Sentinel
from django_taskmq.conf import get_settings
from tests.memory_broker import MemoryBroker


@pytest.fixture
def sentinel():
    made = Sentinel(get_settings(), MemoryBroker(get_settings()), workers=1)
    before = {s: signal.signal(s, made._on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    yield made
    for s, handler in before.items():
        signal.signal(s, handler)


def test_the_same_signal_twice_at_once_is_one_request(sentinel):
    os.kill(os.getpid(), signal.SIGTERM)
    os.kill(os.getpid(), signal.SIGTERM)  # as coreutils timeout sends it: to the process, then to its group
    assert (sentinel.signals, sentinel.stop_reason) == (1, "SIGTERM")


def test_the_same_signal_after_the_burst_is_a_second_request(sentinel, monkeypatch):
    monkeypatch.setattr(sentinel_module, "SIGNAL_BURST", 0.05)
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(0.1)  # past the (shortened) burst: what the test is about
    os.kill(os.getpid(), signal.SIGINT)
    assert (sentinel.signals, sentinel.stop_reason) == (2, "a second stop request, SIGINT")


def test_the_other_stop_signal_is_a_second_request(sentinel):
    os.kill(os.getpid(), signal.SIGINT)
    os.kill(os.getpid(), signal.SIGTERM)
    assert (sentinel.signals, sentinel.stop_reason) == (2, "a second stop request, SIGTERM")
