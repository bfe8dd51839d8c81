"""The sentinel's dispatch buffer: the reserved tasks that have not started, most urgent first.

Reserved work waits here, in a list ordered by priority (higher first) then arrival, not in an
operating-system queue, so the cluster can:

* place urgent tasks ahead of the waiting ones as they arrive (:meth:`Buffer.add`);
* hand the least urgent back to the broker when the list holds more than its limit (a *yield*:
  :meth:`Buffer.add` returns the overflow, :meth:`Buffer.yield_back` hands it to the broker and
  :meth:`Buffer.keep` takes back what could not yield); a task that has yielded ``max_yields``
  times keeps its place, so nothing starves;
* give the most urgent tasks to the workers with room (:meth:`Buffer.take`), and take back what
  could not be sent or came back unstarted (:meth:`Buffer.put_back`);
* tell what to ask the pusher for (:meth:`Buffer.want`);
* take every waiting task out (:meth:`Buffer.take_all`), or those of paused queues
  (:meth:`Buffer.take_queues`), for the sentinel to give back unstarted.

Only :meth:`Buffer.yield_back` talks to the broker (``yield_reservation``): the sentinel runs it in
its bookkeeping thread (:mod:`.chores`), never in its guard loop, on tasks already out of the list.
It knows nothing of processes.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from ..brokers.base import Broker, Reservation
from .messages import Ticket, Want


@dataclass(order=True)
class Waiting:
    """A reserved task waiting in the buffer, ordered by its ``sort_key``: priority then arrival."""

    sort_key: tuple[int, int]
    task: Ticket = field(compare=False)
    stays: bool = field(default=False, compare=False)  # it could not yield: the overflow is another's


class Buffer:
    """At most ``limit`` waiting tasks (more only while they cannot yield) for ``workers`` workers.

    ``failed(what, exc)`` is told about a yield that raised (the sentinel logs it and reconnects
    next time); the task keeps its place as if the call had not happened.
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

    def add(self, tasks: Iterable[Ticket]) -> list[Waiting]:
        """Take a batch from the pusher (in pick order); return the overflow to yield, out of the list."""
        for task in tasks:
            self._place(task)
        return self.overflow() if len(self.waiting) > self.limit else []

    def overflow(self) -> list[Waiting]:
        """Remove and return the least urgent tasks beyond the limit, passing over those that could
        not yield (they keep their place and do not count: the next least urgent goes instead)."""
        excess = len(self.waiting) - self.limit
        if excess > 0:  # what could not yield is beyond the limit (rare: it costs a pass)
            excess -= sum(1 for w in self.waiting if w.stays)
        if excess <= 0:
            return []
        leaving: list[Waiting] = []
        for i in range(len(self.waiting) - 1, -1, -1):
            if len(leaving) == excess:
                break
            if not self.waiting[i].stays:
                leaving.append(self.waiting.pop(i))
        return leaving

    def yield_back(self, leaving: list[Waiting]) -> tuple[int, list[Waiting]]:
        """Hand ``leaving`` (from :meth:`add` or :meth:`overflow`) back to the broker; return how
        many yielded and the ones that did not (yielded ``max_yields`` times, or the call failed),
        for :meth:`keep`. The one method that talks to the broker: it reads no state of the list."""
        yielded = 0
        kept = []
        for item in leaving:
            try:
                given_back = self.broker.yield_reservation(item.task.reservation)
            except Exception as exc:
                self.failed(f"yield of job {item.task.reservation.job_id}", exc)
                given_back = False
            if given_back:
                yielded += 1
            else:
                kept.append(item)
        return yielded, kept

    def keep(self, kept: list[Waiting]) -> list[Waiting]:
        """Put back what could not yield, in its place for good; return the next overflow to yield."""
        for item in kept:
            item.stays = True
            bisect.insort(self.waiting, item)
        return self.overflow()

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

    def take_queues(self, queues: frozenset[str]) -> list[Reservation]:
        """Remove the waiting tasks of ``queues`` (paused); return their reservations, to give back."""
        leaving = [w for w in self.waiting if w.task.reservation.queue in queues]
        if leaving:
            self.waiting = [w for w in self.waiting if w.task.reservation.queue not in queues]
        return [w.task.reservation for w in leaving]

    def take_all(self) -> list[Reservation]:
        """Remove every waiting task; return their reservations, to give back (the leases of what the
        broker does not take bring those tasks back)."""
        reservations = [w.task.reservation for w in self.waiting]
        self.waiting.clear()
        return reservations
