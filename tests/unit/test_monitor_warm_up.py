"""The monitor's start (``cluster.monitor.warm_up``): it connects before the first outcome arrives,
so that the first batch does not also wait for the connection; a database that is away at that
moment does not stop it (recording connects, and logs, when there is work)."""

from __future__ import annotations

import pytest

from django_taskmq.brokers import get_broker
from django_taskmq.cluster.monitor import warm_up
from django_taskmq.conf import get_settings
from tests.memory_broker import MemoryBroker


@pytest.mark.django_db(transaction=True)  # so that close() really closes
def test_warm_up_opens_the_monitors_connection():
    broker = get_broker()
    broker.close()
    assert broker.connection.connection is None
    warm_up(broker)
    assert broker.connection.connection is not None
    assert broker.connection.is_usable()


def test_a_database_that_is_away_at_the_start_does_not_stop_the_monitor():
    class Away(MemoryBroker):
        closed = 0

        def connect(self) -> None:
            raise OSError("connection refused")

        def close(self) -> None:
            self.closed += 1

    broker = Away(get_settings())
    warm_up(broker)  # no exception
    assert broker.closed == 1

