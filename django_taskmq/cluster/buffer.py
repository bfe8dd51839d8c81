"""The sentinel's dispatch buffer: the reserved tasks that have not started, most urgent first.

Reserved work waits here, in a list ordered by priority (higher first) then arrival, not in an
operating-system queue, so the cluster can:

* place urgent tasks ahead of the waiting ones as they arrive (:meth:`Buffer.add`);
* hand the least urgent back to the broker when the list holds more than its limit (a *yield*);
  a task that has yielded ``max_yields`` times keeps its place, so nothing starves;
* give the most urgent tasks to the workers with room (:meth:`Buffer.take`), and take back what
  could not be sent or came back unstarted (:meth:`Buffer.put_back`);
* tell what to ask the pusher for (:meth:`Buffer.want`);
* give every waiting task back, unstarted, on a graceful stop (:meth:`Buffer.give_back`).

It talks to the broker only (``yield_reservation``, ``defer_many``); it knows nothing of processes.
"""

from __future__ import annotations

import bisect
import itertools
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from ..brokers.base import Broker
from .messages import Ticket, Want

logger = logging.getLogger(__name__)


@dataclass(order=True)
class Waiting:
    """A reserved task waiting in the buffer, ordered by its ``sort_key``: priority then arrival."""

    sort_key: tuple[int, int]
    task: Ticket = field(compare=False)


class Buffer:
    """At most ``limit`` waiting tasks (more only while they cannot yield) for ``workers`` workers.

    ``failed(what, exc)`` is told about a broker call that raised (the sentinel logs it and
    reconnects next time); the buffer carries on as if the call had not happened.
    """

    def __init__(self, broker: Broker, limit: int, workers: int,
                 failed: Callable[[str, BaseException], None]) -> None:
        self.broker = broker
        self.limit = limit
        self.workers = workers
        self.failed = failed
        self.waiting: list[Waiting] = []
        self._arrivals = itertools.count()

    def __len__(self) -> int:
        return len(self.waiting)

    def _place(self, task: Ticket) -> None:
        """Insert ``task`` behind the waiting tasks of its priority and ahead of the lower ones."""
        bisect.insort(self.waiting, Waiting((-task.reservation.priority, next(self._arrivals)), task))

    def add(self, tasks: Iterable[Ticket]) -> int:
        """Take a batch from the pusher (in pick order); return how many waiting tasks yielded."""
        for task in tasks:
            self._place(task)
        return self._yield_overflow() if len(self.waiting) > self.limit else 0

    def _yield_overflow(self) -> int:
        """Hand the least urgent unstarted tasks back so the urgent ones fit the limit."""
        yielded = 0
        kept = []
        while len(self.waiting) > self.limit:
            item = self.waiting.pop()
            try:
                given_back = self.broker.yield_reservation(item.task.reservation)
            except Exception as exc:
                self.failed(f"yield of job {item.task.reservation.job_id}", exc)
                given_back = False
            if given_back:
                yielded += 1
            else:  # yielded max_yields times already: it keeps its place so nothing starves
                kept.append(item)
        for item in kept:
            bisect.insort(self.waiting, item)
        return yielded

    def take(self, count: int) -> list[Ticket]:
        """Remove and return the ``count`` most urgent waiting tasks (fewer when fewer wait)."""
        taken = [w.task for w in self.waiting[:count]]
        del self.waiting[:count]
        return taken

    def remove(self, job_id: str) -> Ticket | None:
        """Remove and return the waiting task of ``job_id`` (None when it does not wait here)."""
        for i, waiting in enumerate(self.waiting):
            if waiting.task.reservation.job_id == job_id:
                del self.waiting[i]
                return waiting.task
        return None

    def put_back(self, tasks: Iterable[Ticket]) -> None:
        """Return tasks that could not be sent (or came back unstarted): they wait again, behind
        the others of their priority; no broker call."""
        for task in tasks:
            self._place(task)

    def most_urgent(self) -> int | None:
        """The priority of the first waiting task; None when nothing waits."""
        return self.waiting[0].task.reservation.priority if self.waiting else None

    def want(self, busy: int) -> Want | None:
        """What to ask the pusher for while ``busy`` workers run a task; None: nothing.

        Room for more when the list is shorter than the idle workers plus one, or at least half
        free; otherwise, if tasks wait, only work above the lowest waiting priority (to yield).
        """
        room = self.limit - len(self.waiting)
        starving = len(self.waiting) < self.workers - busy + 1
        if room > 0 and (starving or room >= max(1, self.limit // 2)):
            return Want(room, None)
        if self.waiting:
            return Want(0, self.waiting[-1].task.reservation.priority)
        return None

    def held(self) -> list[str]:
        """The job ids of the waiting tasks."""
        return [w.task.reservation.job_id for w in self.waiting]

    def give_back_queues(self, queues: frozenset[str]) -> int:
        """Return the waiting tasks of ``queues`` (paused) to the broker unstarted, uncounted; return
        how many the broker took. They leave the list even when the broker raises (their leases
        bring them back)."""
        leaving = [w for w in self.waiting if w.task.reservation.queue in queues]
        if not leaving:
            return 0
        self.waiting = [w for w in self.waiting if w.task.reservation.queue not in queues]
        with self.broker.bookkeeping():
            return self.broker.defer_many([w.task.reservation for w in leaving])

    def give_back(self) -> int:
        """Return every waiting task to the broker unstarted, their deliveries not counted; return
        how many the broker took. The list is empty afterwards, even when the broker raises (the
        leases of what it did not take bring those tasks back)."""
        reservations = [w.task.reservation for w in self.waiting]
        self.waiting.clear()
        with self.broker.bookkeeping():
            returned = self.broker.defer_many(reservations)
        logger.info("returned %d unstarted reservation(s) to the broker", returned)
        return returned
