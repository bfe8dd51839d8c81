"""Feeding the workers: the waiting tasks go from the dispatch buffer to the worker slots, by the
dispatch rules (:mod:`.dispatch`), each worker's share in one message through its pipe.

It measures what the rules need (what a worker holds, how long its task has run) and sends; it
reads no pipe. Taking tasks back from a worker (revocation) needs the worker's pipe read first:
the sentinel does that, on the slots :meth:`Feeder.to_steal_from` names.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from .buffer import Buffer
from .dispatch import Load, Rules, deal
from .messages import Ticket, tasks_frame
from .slots import SharedMemory, Slot


class Feeder:
    """Sends the waiting tasks of ``buffer`` to the workers, by ``rules``; ``memory`` tells what
    each worker has started and since when."""

    def __init__(self, buffer: Buffer, memory: SharedMemory, rules: Rules) -> None:
        self.buffer = buffer
        self.memory = memory
        self.rules = rules
        self.prefetch = rules.prefetch

    def feed(self, slots: Sequence[Slot]) -> None:
        """Give the most urgent waiting tasks to the workers with room: one each in turn, all of a
        worker's in one message. With prefetch, a task more urgent than everything a full worker
        holds is sent to it all the same (one over): it runs next there, not after the prefetched."""
        if not self.buffer:
            return
        now = time.monotonic()
        rooms = [(s, self.room(s, now)) for s in slots if s.accepting()]
        open_slots = [s for s, room in rooms if room > 0]
        space = [room for _, room in rooms if room > 0]
        tickets = self.buffer.take(sum(space))
        # The one task the cluster holds, nothing running: its worker may record it (worker.OneAtATime).
        alone = len(tickets) == 1 and not self.buffer and not any(s.running for s in slots)
        left = deal(tickets, space, lambda place, share: hand(open_slots[place], share, alone))
        self.buffer.put_back(left)
        if self.prefetch:
            self._overtake(slots, now)

    def room(self, slot: Slot, now: float) -> int:
        """How many more tasks ``slot`` may be sent (see :meth:`.dispatch.Rules.room`)."""
        return self.rules.room(len(slot.running), self.prefetch and self.in_long_task(slot, now))

    def in_long_task(self, slot: Slot, now: float) -> bool:
        """The worker of ``slot`` (one thread) runs a long task. A worker that has started none of
        what it was sent is not in one, whatever ``since`` says (it is 0 until the first start)."""
        # The clock first: it is cheaper than finding what has started.
        return self.rules.long_task(now - self.memory.since[slot.index]) and bool(self.memory.started(slot))

    def to_steal_from(self, slots: Sequence[Slot]) -> list[Slot]:
        """The workers whose unstarted tasks are to be taken back for an idle worker (see
        :meth:`.dispatch.Rules.steal_from`)."""
        if not self.prefetch or self.buffer:
            return []
        # Asked every turn: the cheap looks first (a worker holding two or more, an idle one).
        if not any(len(s.running) >= 2 for s in slots) or not any(not s.running and s.accepting() for s in slots):
            return []
        now = time.monotonic()
        loads = [Load(len(s.running), len(s.running) >= 2 and self.in_long_task(s, now), not s.running and s.accepting())
                 for s in slots]
        return [slots[position] for position in self.rules.steal_from(loads, waiting=bool(self.buffer))]

    def _overtake(self, slots: Sequence[Slot], now: float) -> None:
        """Send a full worker one task more (once) when it is more urgent than all it holds."""
        for slot in slots:
            urgent = self.buffer.most_urgent()
            if urgent is None:
                return
            if (slot.accepting() and slot.running and self.room(slot, now) <= 0
                    and self.rules.overtakes(urgent, (r.ticket.reservation.priority for r in slot.running.values()))):
                taken = self.buffer.take(1)
                if not hand(slot, taken):
                    self.buffer.put_back(taken)


def hand(slot: Slot, tickets: list[Ticket], alone: bool = False) -> bool:
    """Send ``tickets`` to ``slot`` in one message (``alone``: see :func:`~.messages.tasks_frame`);
    False when that failed."""
    if not slot.send(tasks_frame(tickets, alone)):
        return False
    slot.hold(tickets, time.monotonic())
    return True
