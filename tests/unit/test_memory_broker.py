"""The test broker's own instruments (tests/memory_broker.py): ``transactions`` counts the outermost
``atomic()`` blocks and ``closes`` the ``close()`` calls, which unit tests of the cluster assert on.
No database.

Whether it keeps the Broker contract (leases fenced by tokens, a delivery per reservation, the
poison guard, yields up to ``max_yields``, give-backs that are not deliveries, nested ``atomic()``
blocks) is tested by tests/contract, which runs the same tests on it and on the ORM broker.
"""

from __future__ import annotations

import pytest

from django_taskmq.conf import from_mapping
from tests.memory_broker import MemoryBroker


def test_transactions_count_outermost_blocks_and_closes_count_close():
    broker = MemoryBroker(from_mapping({}))
    with broker.atomic(write=True):
        with broker.atomic():
            pass
        with pytest.raises(RuntimeError), broker.atomic():
            raise RuntimeError
    assert broker.transactions == 1
    with pytest.raises(RuntimeError), broker.atomic():
        raise RuntimeError
    assert broker.transactions == 2  # a block that rolled back counts too
    broker.close()
    assert (broker.closes, broker.transactions) == (1, 2)
