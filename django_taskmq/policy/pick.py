"""The pick rule ("scheme D") and the fairness window that keeps it fair over time.

1. Strict priority across bands: the highest priority among all queue heads goes first.
2. Inside that band, the queue with the smallest ``served / weight`` goes next; ties go to the
   queue whose name sorts first.
3. Inside one queue and priority, first in, first out (the caller supplies each queue's
   candidates already in ``priority desc, enqueue order``).

``served`` is a per-queue counter kept where every cluster sees it (the broker's database), so
fairness does not depend on which process reserves. To stop a queue that was idle for an hour
from taking the whole band when it wakes (its counter would be far behind), a queue that has no
ready work is lifted to the band's virtual time, ``min(served / weight)`` of the busy queues, as
start-time fair queuing does: ``lift_idle``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Protocol, TypeVar


class HasPriority(Protocol):
    priority: int


C = TypeVar("C", bound=HasPriority)


def plan(
    candidates: Mapping[str, Sequence[C]],
    served: Mapping[str, int],
    weights: Mapping[str, int],
    limit: int,
) -> tuple[list[C], dict[str, int]]:
    """Return up to ``limit`` candidates in pick order and the ``served`` counters after them.

    ``candidates`` maps a queue name to its ready messages, head first. Queues missing from
    ``served`` start at 0; queues missing from ``weights`` weigh 1.
    """
    counts = {q: served.get(q, 0) for q in candidates}
    live = [q for q, items in candidates.items() if items]
    picked: list[C] = []
    if len(live) == 1:
        # One queue with work (the usual claim): its candidates are already in pick order.
        picked += candidates[live[0]][:max(limit, 0)]
        counts[live[0]] += len(picked)
        return picked, counts
    position = dict.fromkeys(live, 0)
    weight = {q: weights.get(q, 1) for q in live}
    while position and len(picked) < limit:
        # The head of the highest band; inside it the smallest counts/weight (compared in integers,
        # a Fraction per queue and pick cost a third of a claim), then the first name.
        best, top = None, 0
        for q, i in position.items():
            priority = candidates[q][i].priority
            if best is None or priority > top:
                best, top = q, priority
            elif priority == top:
                ahead = counts[q] * weight[best] - counts[best] * weight[q]
                if ahead < 0 or (ahead == 0 and q < best):
                    best = q
        assert best is not None  # position is not empty
        picked.append(candidates[best][position[best]])
        counts[best] += 1
        position[best] += 1
        if position[best] >= len(candidates[best]):
            del position[best]
    return picked, counts


def virtual_time(served: Mapping[str, int], weights: Mapping[str, int], busy: Sequence[str]) -> Fraction | None:
    """Return ``min(served / weight)`` over the busy queues, or None when none is busy."""
    if not busy:
        return None
    return min(Fraction(served.get(q, 0), weights.get(q, 1)) for q in busy)


def lift_idle(
    served: Mapping[str, int],
    weights: Mapping[str, int],
    busy: Sequence[str],
    idle: Sequence[str],
) -> dict[str, int]:
    """Return the new counters of the idle queues that fell behind the band's virtual time.

    An idle queue keeps its counter when it is already at or ahead of the virtual time; a queue
    behind is brought up to it (rounded up), so on waking it competes as an equal instead of
    draining its backlog of "unused" turns.
    """
    now = virtual_time(served, weights, busy)
    if now is None:
        return {}
    lifted = {}
    for q in idle:
        floor = math.ceil(now * weights.get(q, 1))
        if served.get(q, 0) < floor:
            lifted[q] = floor
    return lifted
