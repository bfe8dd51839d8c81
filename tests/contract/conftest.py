"""The broker contract runs on every broker through one parametrised fixture.

Fixtures
--------
``broker``           here, unlike tests/conftest.py's, parametrised with ids ``memory`` and
                     ``orm``: the in-memory test broker (tests/memory_broker.py; pytest-django refuses it any database access, so a
                     test that reached around the broker would fail) and the ORM broker on this
                     run's database (``--ds`` selects the engine: SQLite, PostgreSQL or MySQL).
                     A test that takes it asserts only through the Broker's own methods (see
                     tests/contract/helpers.py).
``reconfigure``      ``reconfigure(**TASKMQ keys) -> broker``: change settings for this test and
                     return the same kind of broker on them (the memory broker keeps its jobs).
``orm_broker``       the ORM broker only, on a clean database (tests/conftest.py's ``broker``).
                     Tests that take it are the ORM broker's own: they look at rows through the
                     ORM, run several processes on one database, count SQL statements, migrate,
                     or go through the public API (``async_task``, ``run_sync``), which uses the
                     configured (ORM) broker.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from django_taskmq.brokers.base import Broker
from tests.contract import helpers
from tests.memory_broker import MemoryBroker

# The mark, not only the fixture, must say that the ORM tests use the database: pytest-django
# creates the test databases that the collected tests' marks and fixtures ask for.
BROKERS = ["memory", pytest.param("orm", marks=pytest.mark.django_db)]


@pytest.fixture
def orm_broker(db: None) -> Iterator[Broker]:
    """The configured ORM broker (``get_broker()``) on a clean database, a fresh object."""
    from django_taskmq import brokers

    brokers._brokers.clear()
    yield brokers.get_broker()
    brokers._brokers.clear()


@pytest.fixture(params=BROKERS)
def broker(request: pytest.FixtureRequest) -> Broker:
    """The broker under test: see the module docstring."""
    from django_taskmq.conf import get_settings

    helpers.UNPICKLED.clear()
    if request.param == "memory":
        return MemoryBroker(get_settings())
    return request.getfixturevalue("orm_broker")


@pytest.fixture
def reconfigure(broker: Broker, taskmq_settings: Callable[..., dict]) -> Callable[..., Broker]:
    """Return ``reconfigure(**changes)``: override ``TASKMQ`` keys, return the broker on the new settings."""
    from django_taskmq.brokers import get_broker
    from django_taskmq.conf import get_settings

    def apply(**changes: Any) -> Broker:
        taskmq_settings(**changes)
        if isinstance(broker, MemoryBroker):
            broker.settings = get_settings()
            return broker
        return get_broker()  # the cache was reset with the settings

    return apply
