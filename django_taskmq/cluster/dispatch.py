"""The dispatch rules: how many tasks each worker may hold, who gets which waiting task, when an
urgent task overtakes what a worker holds, and from which workers prefetched tasks are taken back.

Pure rules, free of processes, pipes and clocks: the sentinel measures (how many tasks a worker
holds, how long its task has run) and sends; these decide.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from .messages import Ticket

#: Seconds after which the task a worker (one thread, prefetch) runs counts as long: nothing more is
#: sent to wait behind it, and what waits there is taken back for an idle worker.
STEAL_AFTER = 0.05


class Load(NamedTuple):
    """What the dispatch rules need to know of one worker."""

    holding: int  # tasks it holds: running, or prefetched behind the one that runs
    long_task: bool  # it runs a long task (see Rules.long_task)
    idle: bool  # it may be sent work and holds none


@dataclass(frozen=True)
class Rules:
    """The rules for workers with ``threads`` threads that may each hold ``depth`` tasks (one per
    thread, and with one thread the prefetched ones waiting behind the task that runs)."""

    threads: int
    depth: int
    #: A worker may hold tasks it has not started (an attribute: the guard loop asks every turn).
    prefetch: bool = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "prefetch", self.depth > self.threads)

    def long_task(self, ran: float) -> bool:
        """A task that has run ``ran`` seconds counts as long: :data:`STEAL_AFTER` or more. (A
        worker that has started none of what it holds runs none, whatever its clock says.)"""
        return ran >= STEAL_AFTER

    def room(self, holding: int, long_task: bool) -> int:
        """How many more tasks a worker holding ``holding`` may be sent. With prefetch, none to hold
        behind a long task: they would wait for it (or be taken back)."""
        if self.prefetch and long_task:
            return self.threads - holding
        return self.depth - holding

    def overtakes(self, urgent: int, held: Iterable[int]) -> bool:
        """A task of priority ``urgent`` goes to a full worker holding tasks of the priorities
        ``held`` (one over its room, once): only with prefetch, when it is more urgent than them all."""
        priorities = list(held)
        return self.prefetch and bool(priorities) and urgent > max(priorities)

    def steal_from(self, loads: Sequence[Load], waiting: bool) -> list[int]:
        """The positions in ``loads`` of the workers whose unstarted tasks are taken back for an idle
        worker: with prefetch, while nothing waits in the sentinel (``waiting``) and a worker idles,
        every worker holding tasks behind a long one."""
        if not self.prefetch or waiting or not any(load.idle for load in loads):
            return []
        return [i for i, load in enumerate(loads) if load.holding >= 2 and load.long_task]


def round_robin(tickets: Sequence[Ticket], rooms: Sequence[int]) -> tuple[list[list[Ticket]], list[Ticket]]:
    """Deal ``tickets`` (most urgent first) one at a time to the places that have room left;
    return each place's share and what did not fit."""
    plan: list[list[Ticket]] = [[] for _ in rooms]
    left = list(tickets)
    while left and any(room > len(p) for room, p in zip(rooms, plan)):
        for room, batch in zip(rooms, plan):
            if room > len(batch) and left:
                batch.append(left.pop(0))
    return plan, left


def deal(tickets: Sequence[Ticket], rooms: Sequence[int], hand: Callable[[int, list[Ticket]], bool]) -> list[Ticket]:
    """Give ``tickets`` (most urgent first) to the places with ``rooms`` by :func:`round_robin`, each
    place's share in one ``hand(position, share)``; return what no place took, most urgent first.

    The most urgent go to distinct places first. A place whose ``hand`` fails (False) is left out
    and its share is dealt again among the places after it.
    """
    places = list(range(len(rooms)))
    left = list(tickets)
    while places and left:
        plan, rest = round_robin(left, [rooms[p] for p in places])
        for i, (place, share) in enumerate(zip(places, plan)):
            if share and not hand(place, share):
                left = sorted([t for s in plan[i:] for t in s] + rest, key=urgency)
                places = places[i + 1:]
                break
        else:
            return rest
    return left


def urgency(ticket: Ticket) -> int:
    """Sort key: the most urgent first (higher priority)."""
    return -ticket.reservation.priority
