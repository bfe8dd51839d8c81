"""Start and stop ``manage.py qcluster`` and measure its process tree through /proc.

Stdlib only (Linux). No psutil: django-q2 changes behaviour when psutil is importable.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import time
from collections import deque
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


class ClusterDied(RuntimeError):
    """The cluster process exited while a workload still needed it."""


class Cluster:
    """One ``qcluster`` subprocess with its output in ``log_path``.

    It runs in its own session, so that whatever it leaves behind can be killed by its
    process group id without touching anything else on the machine.
    """

    def __init__(self, python: str, project_dir: Path, env: dict[str, str], log_path: Path,
                 extra_args: tuple[str, ...] = (), argv: list[str] | None = None) -> None:
        self.argv = argv or [python, str(project_dir / "manage.py"), "qcluster", *extra_args]
        self.cwd = project_dir
        self.env = env
        self.log_path = log_path
        self.process: subprocess.Popen | None = None
        self.started_at: float | None = None

    def start(self) -> float:
        """Start the cluster; return the wall-clock time just before the fork."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        self.started_at = time.time()
        self.process = subprocess.Popen(
            self.argv, cwd=self.cwd, env=self.env, stdin=subprocess.DEVNULL,
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        log.close()  # the child holds its own descriptor
        return self.started_at

    @property
    def pid(self) -> int:
        assert self.process is not None, "cluster not started"
        return self.process.pid

    def check_alive(self) -> None:
        """Raise :class:`ClusterDied` with the end of the log if the cluster exited."""
        if self.process is not None and self.process.poll() is not None:
            raise ClusterDied(f"qcluster exited with code {self.process.returncode}; "
                              f"log {self.log_path}:\n{self.log_tail()}")

    def wait_exit(self, timeout: float) -> int:
        """Wait until the main process exits and return its exit code, seen within a millisecond.

        ``Popen.wait(timeout)`` sleeps in steps that grow to 50 ms: a burst's end-to-end time
        would carry up to that much of the harness. A pidfd (Linux 5.3+) is readable the moment
        the process exits; without one, poll every millisecond.
        Raise ``subprocess.TimeoutExpired`` after ``timeout`` seconds.
        """
        assert self.process is not None, "cluster not started"
        deadline = time.monotonic() + timeout
        try:
            pidfd = os.pidfd_open(self.process.pid)
        except (AttributeError, OSError):
            pidfd = None
        try:
            while self.process.poll() is None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise subprocess.TimeoutExpired(self.argv, timeout)
                if pidfd is None:
                    time.sleep(min(0.001, remaining))
                else:
                    select.select([pidfd], [], [], remaining)
        finally:
            if pidfd is not None:
                os.close(pidfd)
        return self.process.returncode

    def stop(self, grace: float = 30.0) -> dict:
        """Stop gracefully with SIGTERM to the main process, then kill the group.

        SIGTERM goes to the main process only: that is how a supervisor stops a cluster,
        and django-q2's sentinel treats a direct SIGTERM as an immediate exit.
        Return how the stop went (seconds, whether a SIGKILL was needed).
        """
        if self.process is None:
            return {}
        t0 = time.time()
        killed = False
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(grace)
            except subprocess.TimeoutExpired:
                killed = True
        # Children left behind (a stop that hung, orphans) go with the whole group.
        leftovers = _group_members(self.process.pid)
        if leftovers:
            killed = True
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.process.wait()
        return {"stop_seconds": round(time.time() - t0, 3), "stop_needed_sigkill": killed}

    def log_tail(self, lines: int = 40) -> str:
        try:
            with open(self.log_path, "rb") as f:
                return b"".join(deque(f, maxlen=lines)).decode(errors="replace")
        except OSError:
            return ""

    def tree(self) -> list[int]:
        """Return the pids of the cluster's main process and all its descendants."""
        return process_tree(self.pid)


def _read_stat(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            data = f.read()
    except OSError:
        return None
    # comm (field 2) may contain spaces and parentheses: split after the last ')'.
    return data[data.rindex(")") + 2:].split()


def _group_members(pgid: int) -> list[int]:
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _read_stat(int(entry))
            # fields[0] is state (field 3), so pgrp (field 5) is fields[2]
            if fields and int(fields[2]) == pgid and fields[0] != "Z":
                members.append(int(entry))
    return members


def process_tree(root: int) -> list[int]:
    """Return ``root`` and its live descendants, found through /proc/*/stat ppid links."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _read_stat(int(entry))
            if fields and fields[0] != "Z":
                children.setdefault(int(fields[1]), []).append(int(entry))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        if _read_stat(pid) is not None:
            tree.append(pid)
            todo.extend(children.get(pid, ()))
    return tree


def cpu_seconds(pid: int) -> float | None:
    """Return user + system CPU seconds of one process (not of its reaped children)."""
    fields = _read_stat(pid)
    if fields is None:
        return None
    # utime and stime are fields 14 and 15 of /proc/<pid>/stat
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def sample_tree_cpu(root: int, seconds: float, interval: float = 0.5) -> dict:
    """Measure the CPU used by the tree under ``root`` during ``seconds``.

    Sampled repeatedly so processes born during the window count from their birth and
    processes that die keep what they used until their last sample (at most
    ``interval`` of it is lost).
    """
    first: dict[int, float] = {}
    last: dict[int, float] = {}

    def sample(initial: bool) -> None:
        for pid in process_tree(root):
            used = cpu_seconds(pid)
            if used is None:
                continue
            first.setdefault(pid, used if initial else 0.0)
            last[pid] = used

    t0 = time.monotonic()
    sample(initial=True)
    while (elapsed := time.monotonic() - t0) < seconds:
        time.sleep(min(interval, seconds - elapsed))
        sample(initial=False)
    wall = time.monotonic() - t0
    used = sum(last[pid] - first[pid] for pid in last)
    return {"cpu_seconds": used, "wall_seconds": wall, "cpu_percent": 100.0 * used / wall,
            "processes": len(last)}


def tree_cpu_total(root: int) -> float:
    """Return the CPU seconds used so far by the tree under ``root``, exited members included.

    Sum over the live tree (zombies too) of utime + stime + cutime + cstime: a process that
    exited and was reaped by its parent is in that parent's cutime/cstime; one not reaped yet
    still has its own stat. So every process of the tree counts once, whatever forked, exited
    or was recycled in between (only a process orphaned to init is lost).
    """
    children: dict[int, list[int]] = {}
    stats: dict[int, list[str]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _read_stat(int(entry))
            if fields:
                stats[int(entry)] = fields
                children.setdefault(int(fields[1]), []).append(int(entry))
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        fields = stats.get(pid)
        if fields is None:
            continue
        # utime, stime, cutime, cstime: fields 14-17 of /proc/<pid>/stat
        total += sum(int(f) for f in fields[11:15])
        todo.extend(children.get(pid, ()))
    return total / CLOCK_TICKS


def _status_kb(pid: int, key: str, path: str = "status") -> int | None:
    try:
        with open(f"/proc/{pid}/{path}") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def tree_memory(root: int) -> dict:
    """Return RSS and PSS (MiB) summed over the tree under ``root``.

    RSS counts pages shared between forked processes once per process, so the sum
    overstates real use; PSS splits shared pages between their users and adds up.
    """
    pids = process_tree(root)
    rss = [_status_kb(pid, "VmRSS") or 0 for pid in pids]
    pss = [_status_kb(pid, "Pss", "smaps_rollup") or 0 for pid in pids]
    return {"rss_mb": sum(rss) / 1024, "pss_mb": sum(pss) / 1024, "processes": len(pids),
            "rss_mb_per_process": sorted(round(r / 1024, 1) for r in rss)}


def tree_processes(root: int) -> list[dict]:
    """Return every live process of the tree under ``root`` with its memory, root first.

    Each: pid, ppid, start (clock ticks after boot), comm, threads, rss_kb (VmRSS) and pss_kb
    (smaps_rollup's Pss: pages shared with other processes count by share, so the sum over
    the tree is what the tree really holds). The rest follow in the order they started.
    """
    out = []
    for pid in process_tree(root):
        fields = _read_stat(pid)
        if fields is None:
            continue
        try:
            with open(f"/proc/{pid}/comm") as f:
                comm = f.read().strip()
        except OSError:
            comm = "?"
        # ppid is field 4, num_threads field 20, starttime field 22 of /proc/<pid>/stat
        out.append({"pid": pid, "ppid": int(fields[1]), "start": int(fields[19]), "comm": comm,
                    "threads": int(fields[17]),
                    "rss_kb": _status_kb(pid, "VmRSS") or 0, "pss_kb": _status_kb(pid, "Pss", "smaps_rollup") or 0})
    rest = sorted((p for p in out if p["pid"] != root), key=lambda p: (p["start"], p["pid"]))
    return [p for p in out if p["pid"] == root] + rest


def trim_log(path: Path, max_bytes: int = 4 << 20, keep_lines: int = 300) -> None:
    """Shrink a large log of a successful run to its first and last ``keep_lines`` lines.

    django-q2 logs three lines per task at INFO, so a 100k-job drain leaves tens of MB.
    """
    try:
        if path.stat().st_size <= max_bytes:
            return
        with open(path, "rb") as f:
            head = [next(f, b"") for _ in range(keep_lines)]
            tail = deque(f, maxlen=keep_lines)
    except OSError:
        return
    marker = b"\n... [trimmed by the benchmark: the run succeeded] ...\n\n"
    path.write_bytes(b"".join(head) + marker + b"".join(tail))
