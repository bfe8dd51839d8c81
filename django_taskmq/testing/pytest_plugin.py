"""The pytest plugin of :mod:`django_taskmq.testing`, registered through the ``pytest11`` entry point.

``taskmq_jobs``: a :class:`~django_taskmq.testing.Captured` of what the test enqueues (it uses
pytest-django's ``db`` fixture), with ``assert_enqueued``, ``refute_enqueued``, ``jobs`` and
``drain()``; ``taskmq_clock``: a :class:`~django_taskmq.testing.TestClock` active for the test
(``frozen_clock()``). Nothing here imports Django models at import time: pytest loads the plugin before
Django is set up.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture
def taskmq_jobs(db: Any) -> Iterator[Any]:
    """The jobs the test enqueued, captured from its start."""
    from . import capture_jobs

    with capture_jobs() as captured:
        yield captured


@pytest.fixture
def taskmq_clock(db: Any) -> Iterator[Any]:
    """A :class:`~django_taskmq.testing.TestClock` active for the test (``frozen_clock()``):
    durable tasks run in the test sleep until ``taskmq_clock.advance(...)`` passes their wake time."""
    from . import frozen_clock

    with frozen_clock() as clock:
        yield clock
