"""What the cluster's processes say to each other. Every message between processes is defined here.

Sentinel and pusher, over their pipe (pickled named tuples: immutable, fast to pickle):

* :class:`Want` (sentinel -> pusher), answered by one :class:`Batch` of :class:`Ticket`\\ s
  (pusher -> sentinel); :class:`Stop` (sentinel -> pusher) ends the pusher.

Sentinel and each worker, over the worker's own pipe (raw bytes, never unpickled by the sentinel):

* sentinel -> worker: a tasks frame (:func:`tasks_frame`: one or more :attr:`Ticket.blob`\\ s,
  pickled :class:`~django_taskmq.runtime.execution.TaskMessage`\\ s, opened by :func:`read_tasks_frame`
  and :func:`load_task`; marked :data:`ALONE` when its one task met an idle cluster);
  :data:`STOP`, the poison pill (the worker finishes what it runs, returns what it has not
  started, then exits); or :func:`cancel_frame`, asking a worker with several
  threads to interrupt one task (past its timeout, or cancelled and past ``cancel_grace``); or
  :func:`cancel_request_frame`, asking it to tell one task that it was cancelled;
* worker -> sentinel: :data:`READY` once, when the worker can take work; :data:`RETIRING` when
  it wants to stop (``max_rss``); :func:`unstarted_frame`, the job ids of the prefetched tasks it
  hands back at the poison pill; and an outcome frame per task, one status
  byte (:data:`SUCCEEDED`, :data:`FAILED` or :data:`TIMED_OUT`), the job id, a NUL byte, then the
  pickled :class:`~django_taskmq.runtime.execution.Outcome`: :func:`outcome_frame` builds it,
  :func:`read_outcome_frame` splits it without unpickling; or, for a success its worker recorded
  itself, :func:`recorded_frame` (:data:`RECORDED`, the job id, a NUL byte).

Sentinel and monitor, over the result queue:

* a list of pickled outcomes (``bytes``), forwarded unopened, one list per turn of the guard
  loop, ending with :data:`IDLE` when the cluster holds nothing else (no more outcomes are coming:
  the monitor records at once instead of gathering); :data:`END_OF_RESULTS` (None) asks the
  monitor to record what it has and exit. :func:`load_outcomes` opens what the monitor gathered.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterable
from typing import NamedTuple

from ..runtime import execution as ex
from ..brokers.base import Reservation
from ..envelope import Envelope
from ..runtime.execution import Outcome, TaskMessage


class Want(NamedTuple):
    """Sentinel -> pusher: room for ``room`` more tasks; ``floor`` is the lowest waiting priority.

    With ``room == 0`` the pusher only looks for work above ``floor`` (to make the cluster yield).
    """

    room: int
    floor: int | None


class Ticket(NamedTuple):
    """A verified task as the sentinel holds it: what it needs to order, time and renew it, and
    the task for a worker (:attr:`blob`, forwarded unopened; :func:`load_task` opens it).

    The blob pickles the reservation's fields with the envelope's pickle as it was verified: the
    pusher does not pickle the envelope again (a few µs per job).
    """

    reservation: Reservation
    timeout: float | None
    blob: bytes

    @classmethod
    def of(cls, message: TaskMessage) -> Ticket:
        """The ticket of a task in hand (tests, sync tools); the pusher uses :meth:`verified`."""
        return cls._build(message.reservation, message.envelope,
                          pickle.dumps(message.envelope, pickle.HIGHEST_PROTOCOL))

    @classmethod
    def verified(cls, reservation: Reservation, salt: str) -> Ticket:
        """Verify the package of ``reservation`` and return its ticket; raise
        :class:`~django_taskmq.exceptions.BadPackage` with the reason."""
        return cls._build(*ex.unpack_verified(reservation, salt))

    @classmethod
    def _build(cls, reservation: Reservation, envelope: Envelope, pickled: bytes) -> Ticket:
        blob = pickle.dumps((tuple(reservation), pickled), pickle.HIGHEST_PROTOCOL)
        return cls(reservation, envelope.options.get("timeout"), blob)

    def message(self) -> TaskMessage:
        return load_task(self.blob)


def load_task(blob: bytes) -> TaskMessage:
    """Open a :attr:`Ticket.blob` (what a worker receives): the envelope's pickle was verified by
    the pusher, against the package's signature."""
    fields, pickled = pickle.loads(blob)
    return TaskMessage(Reservation._make(fields), pickle.loads(pickled))


class Batch(NamedTuple):
    """Pusher -> sentinel: verified tasks in pick order; ``drained`` when nothing was ready;
    ``paused``: the queues paused now (the sentinel gives back what it holds of them)."""

    tasks: tuple[Ticket, ...] = ()
    drained: bool = False
    paused: frozenset[str] = frozenset()


class Stop(NamedTuple):
    """Sentinel -> pusher: reserve nothing more and exit."""


# -- the workers' pipes ----------------------------------------------------------------------------
STOP = b"stop"  # sentinel -> worker, the poison pill
TASKS = b"T"  # sentinel -> worker, first byte of a tasks frame (see tasks_frame)
ALONE = b"A"  # ... of a tasks frame whose one task met an idle cluster: its worker may record it
CANCEL = b"cancel:"  # sentinel -> worker, followed by a job id: interrupt that task (see cancel_frame)
CANCEL_REQUEST = b"cancel?"  # sentinel -> worker, then a job id: that task was cancelled (see cancel_request_frame)
READY = b"R"  # worker -> sentinel: spawned and ready for work
RETIRING = b"Q"  # worker -> sentinel: send no more work; the worker exits once its tasks are done
UNSTARTED = b"U"  # worker -> sentinel, then job ids: prefetched tasks handed back unstarted
SUCCEEDED = b"S"  # status byte of an outcome frame: the task succeeded
RECORDED = b"D"  # ... it succeeded and the worker recorded it: the frame carries no outcome
FAILED = b"F"  # status byte of an outcome frame: any other outcome ...
TIMED_OUT = b"T"  # ... but a task interrupted at its timeout (threads > 1)
SUSPENDED = b"Z"  # ... a durable task that sleeps or waits: neither a success nor a failure


def dump_outcome(outcome: Outcome) -> bytes:
    """Pickle one outcome for the monitor (a worker's, or one the sentinel records for a lost task).

    The envelope goes without the task's arguments: recording reads only its function and options
    (retry, hooks, chain, cache), and arguments can be large, or changed by the task into
    something that no longer pickles. They stay in the job's package.
    """
    envelope = outcome.envelope
    if envelope is not None and (envelope.args or envelope.kwargs):
        outcome = outcome._replace(envelope=Envelope(func=envelope.func, options=envelope.options))
    return pickle.dumps(outcome, pickle.HIGHEST_PROTOCOL)


def tasks_frame(tickets: Iterable[Ticket], alone: bool = False) -> bytes:
    """Sentinel -> worker: :data:`TASKS`, then each ticket's blob preceded by its length (4 bytes).

    ``alone``: the frame carries the one task the cluster holds (nothing else waits in the sentinel
    or runs in a worker); it starts with :data:`ALONE` instead.
    """
    return (ALONE if alone else TASKS) + b"".join(len(t.blob).to_bytes(4, "big") + t.blob for t in tickets)


def is_tasks_frame(frame: bytes) -> bool:
    """True for a frame built by :func:`tasks_frame`."""
    return frame[:1] in (TASKS, ALONE)


def read_tasks_frame(frame: bytes) -> list[bytes]:
    """Split a tasks frame into the blobs it carries, in order."""
    blobs, at = [], 1
    while at < len(frame):
        size = int.from_bytes(frame[at:at + 4], "big")
        blobs.append(frame[at + 4:at + 4 + size])
        at += 4 + size
    return blobs


def unstarted_frame(job_ids: Iterable[str]) -> bytes:
    """Worker -> sentinel: the ids of the tasks it received and hands back without starting them."""
    return UNSTARTED + ",".join(job_ids).encode()


def read_unstarted_frame(frame: bytes) -> list[str]:
    return [job_id for job_id in frame[1:].decode().split(",") if job_id]


def cancel_frame(job_id: str) -> bytes:
    """Sentinel -> worker: interrupt the task of ``job_id``, which ran past its timeout."""
    return CANCEL + job_id.encode()


def cancel_request_frame(job_id: str) -> bytes:
    """Sentinel -> worker (several threads): the job of ``job_id`` was cancelled; its task may stop."""
    return CANCEL_REQUEST + job_id.encode()


def outcome_frame(outcome: Outcome) -> bytes:
    """Worker -> sentinel: the status byte, the job id and a NUL byte, then the pickled outcome.

    An outcome that still does not pickle is sent as UNSTORABLE, saying why (a safety net: results
    arrive sealed, and the task's arguments stay behind, see :func:`dump_outcome`). The status byte and the id let the sentinel count outcomes and know
    which task ended without unpickling them.
    """
    try:
        data = dump_outcome(outcome)
    except Exception as exc:
        outcome = outcome._replace(envelope=None, status=ex.UNSTORABLE, result=None,
                                   error=f"outcome cannot be pickled: {ex.describe(exc)}", traceback="")
        data = dump_outcome(outcome)
    status = {ex.SUCCESS: SUCCEEDED, ex.TIMEOUT: TIMED_OUT, ex.SUSPEND: SUSPENDED}.get(outcome.status, FAILED)
    return status + outcome.reservation.job_id.encode() + b"\0" + data


def recorded_frame(job_id: str) -> bytes:
    """Worker -> sentinel: the task of ``job_id`` succeeded and its worker recorded that itself."""
    return RECORDED + job_id.encode() + b"\0"


def read_outcome_frame(frame: bytes) -> tuple[bytes, str, bytes]:
    """Split an outcome frame: (its status byte, the job id, the pickled outcome, unopened)."""
    head, _, data = frame.partition(b"\0")
    return head[:1], head[1:].decode(), data


# -- the result queue ------------------------------------------------------------------------------
END_OF_RESULTS = None  # sentinel -> monitor: record what is left, then exit
IDLE = b""  # last item of a list: nothing else waits or runs in the cluster (never a pickle)


def says_idle(part: list[bytes] | None) -> bool:
    """True for a list of outcomes that ends with :data:`IDLE`."""
    return part is not None and len(part) > 0 and part[-1] == IDLE


def load_outcomes(parts: Iterable[list[bytes] | None]) -> list[Outcome]:
    """Unpickle the outcomes of the lists the monitor took from the result queue (skipping the
    end mark and :data:`IDLE`)."""
    return [pickle.loads(o) for part in parts if part is not END_OF_RESULTS for o in part if o != IDLE]
