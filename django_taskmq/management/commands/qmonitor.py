"""``manage.py qmonitor``: a live terminal view of the clusters, the queues and the throughput.

Redrawn every second (``--interval``); the throughput, which reads the most rows, every
``THROUGHPUT_EVERY`` seconds. ``q`` or Ctrl-C exits; ``--once`` prints one frame and exits.
"""

from __future__ import annotations

import contextlib
import os
import signal
import select
import sys
import termios
import time
import tty
from collections.abc import Iterator

from django.core.management.base import CommandError
from django.utils import timezone
from rich.console import Console
from rich.live import Live

from django_taskmq.observability import statistics, terminal
from django_taskmq.brokers import get_broker
from django_taskmq.management.operator_command import OperatorCommand

THROUGHPUT_EVERY = 10.0  # seconds between reads of the throughput
COUNTED = [s.value for s in terminal.FINISHED]


class Command(OperatorCommand):
    help = "Watch the clusters, their workers, the queues and the throughput live (q or Ctrl-C quits)."

    def add_arguments(self, parser):
        parser.add_argument("--once", action="store_true", help="print one frame and exit (for scripts)")
        parser.add_argument("--interval", type=float, default=1.0, help="seconds between frames (default 1)")

    def handle(self, *args, **options):
        interval = options["interval"]
        if not interval > 0:
            raise CommandError("--interval must be a positive number of seconds")
        self.where = get_broker().describe()
        self.throughput: statistics.Throughput | None = None
        self.throughput_at = 0.0
        self.throughput_read_at = None
        if options["once"]:
            # The stream under Django's OutputWrapper, which would add a newline to each of rich's writes.
            out = getattr(self.stdout, "_out", self.stdout)
            console = Console(file=out, width=int(os.environ.get("COLUMNS", terminal.WIDTH)), highlight=False)
            self.width = console.width
            console.print(self.frame(hint=""))
            return
        console = Console(highlight=False)
        self.width = console.width
        # Ctrl-C must quit even when this process was started with SIGINT ignored (a child of a
        # non-interactive shell's background job inherits that): Python then installs no handler.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            with _keys() as pressed, Live(self.frame(), console=console, screen=console.is_terminal,
                                          auto_refresh=False, redirect_stdout=False) as live:
                while True:
                    if pressed(interval) == "q":
                        break
                    self.width = console.width  # the terminal may have been resized
                    live.update(self.frame(), refresh=True)
        except KeyboardInterrupt:
            pass

    def frame(self, hint: str = "q or Ctrl-C quits"):
        """Read the numbers and build one frame (the throughput at most every THROUGHPUT_EVERY s)."""
        now = time.monotonic()
        if self.throughput is None or now - self.throughput_at >= THROUGHPUT_EVERY:
            self.throughput = statistics.throughput()
            self.throughput_at, self.throughput_read_at = now, timezone.localtime()
        taken = statistics.database_now()
        clusters = statistics.clusters_alive(now=taken)
        snap = statistics.Snapshot(taken_at=timezone.localtime(taken),
                                   queues=statistics.queue_stats(now=taken.timestamp(), clusters=clusters),
                                   clusters=clusters, throughput=self.throughput)
        counts = statistics.jobs_by_queue_and_state(states=COUNTED)
        return terminal.frame(snap, counts, self.where, self.throughput_read_at, hint=hint,
                              width=getattr(self, "width", terminal.WIDTH))


@contextlib.contextmanager
def _keys() -> Iterator:
    """Yield ``pressed(timeout)``: wait up to ``timeout`` seconds for a key, return it (or None).

    On a terminal, stdin is put in cbreak mode (keys arrive without Enter, Ctrl-C still interrupts)
    and restored afterwards; without one, it just sleeps.
    """
    stream = sys.stdin
    if not (stream and stream.isatty()):
        yield lambda timeout: time.sleep(timeout)
        return
    fd = stream.fileno()
    saved = termios.tcgetattr(fd)
    tty.setcbreak(fd)

    def pressed(timeout: float) -> str | None:
        ready, _, _ = select.select([fd], [], [], timeout)
        return os.read(fd, 1).decode(errors="replace").lower() if ready else None

    try:
        yield pressed
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)
