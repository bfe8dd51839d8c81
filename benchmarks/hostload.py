"""CPU load of the whole machine during one workload run, split into ours and foreign (stdlib).

Used by ``run.py`` around every workload run:

* **busy**: all CPUs' non-idle time from ``/proc/stat`` (user, nice, system, irq, softirq,
  steal) over the run;
* **own**: the benchmark's processes: run.py itself plus every process it started and reaped
  (the driver, the cluster and the cluster's children all end up in run.py's
  ``os.times()`` children times once the driver exited: each parent reaps its children);
* **servers**: the database servers working for the run, sampled every 0.25 s from
  ``/proc``: PostgreSQL backends whose process title names a ``bench_`` database,
  ``redis-server``, and the whole MariaDB/MySQL server (``mariadbd``/``mysqld``: one process
  whose threads cannot be told apart by database from ``/proc``, so other clients' MariaDB
  work counts as the run's, and foreign load is a lower bound on that part). A PostgreSQL
  backend that lives less than one sample period is missed (django-q2 with ``CONN_MAX_AGE=0``
  opens many): it counts as foreign, so foreign load is an upper bound on that part;
* **foreign** = busy - own - servers: what other programs on the machine took meanwhile.

Values are in cores (CPU seconds / wall seconds); the machine has ``os.cpu_count()`` of them.
"""

from __future__ import annotations

import os
import threading
import time

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _busy_seconds() -> float:
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    user, nice, system, idle, iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    return (user + nice + system + irq + softirq + steal) / CLOCK_TICKS


def _server_cpu() -> dict[int, float]:
    """Return {pid: CPU seconds} of the PostgreSQL bench_ backends, redis-server and mariadbd."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read(200)
            program = cmdline.split(b"\0", 1)[0].rsplit(b"/", 1)[-1]
            if not (cmdline.startswith(b"postgres:") and b" bench_" in cmdline) and b"redis-server" not in cmdline \
                    and program not in (b"mariadbd", b"mysqld"):
                continue
            with open(f"/proc/{entry}/stat") as f:
                data = f.read()
        except OSError:
            continue
        fields = data[data.rindex(")") + 2:].split()
        found[int(entry)] = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
    return found


class LoadMeter:
    """``with LoadMeter() as meter: ...``; then ``meter.result`` (a dict of cores)."""

    def __init__(self, interval: float = 0.25) -> None:
        self.interval = interval
        self.result: dict = {}
        self._stop = threading.Event()
        self._first: dict[int, float] = {}
        self._last: dict[int, float] = {}

    def _sample(self, initial: bool) -> None:
        for pid, used in _server_cpu().items():
            self._first.setdefault(pid, used if initial else 0.0)
            self._last[pid] = used

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample(initial=False)

    def __enter__(self) -> "LoadMeter":
        self._t0 = time.monotonic()
        self._busy0 = _busy_seconds()
        self._times0 = os.times()
        self._sample(initial=True)
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._sample(initial=False)
        times1 = os.times()
        wall = time.monotonic() - self._t0
        busy = _busy_seconds() - self._busy0
        own = sum(getattr(times1, k) - getattr(self._times0, k)
                  for k in ("user", "system", "children_user", "children_system"))
        servers = sum(self._last[p] - self._first[p] for p in self._last)
        foreign = max(0.0, busy - own - servers)
        wall = max(wall, 1e-9)
        self.result = {"wall_s": round(wall, 3), "cores": os.cpu_count(),
                       "busy_cores": round(busy / wall, 3), "own_cores": round(own / wall, 3),
                       "server_cores": round(servers / wall, 3), "foreign_cores": round(foreign / wall, 3)}
