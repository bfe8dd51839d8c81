"""A host cut off from the database (PostgreSQL or MySQL/MariaDB, root): a ``qcluster`` in its own network namespace
loses its link mid-work for longer than the lease.

The namespace reaches the server through a veth pair on a private /30: packets to the host side's
address and the server's port are sent on (DNAT) to the address the tests use (127.0.0.1), with
that address as their source (SNAT), so the server needs no new ``listen_addresses`` (no restart)
and no ``pg_hba.conf`` line or MySQL grant: the machine's server configuration is not touched. The link is cut
by dropping every packet inside the namespace (its own iptables), both ways, as a host whose
network fails silently: no reset, no error, nothing answers.

The test sets the namespace up and takes it down itself; it needs root, and is skipped without it
unless CI is "true" (then it fails).
"""

from __future__ import annotations

import collections
import contextlib
import ipaddress
import os
import shutil
import signal
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from django.db import connections

from django_taskmq import enqueue_many

from .conftest import engine_is_server, is_alive, job_states, jobs

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.skipif(not engine_is_server(), reason="cuts a host off its database server"),
]

# How the test settings of each engine are told the server's host, and its port when not set.
HOST_VARIABLE = {"postgresql": "PGHOST", "mysql": "MYSQL_HOST"}
DEFAULT_PORT = {"postgresql": 5432, "mysql": 3306}
# How a cluster reads the error of a connection it lost, per engine, as it says it reconnects.
RECONNECTING = {"postgresql": "the connection failed or was lost: reconnecting",
                "mysql": "the connection was lost: reconnecting"}
# What it logs when the statement clock cut a statement that ran past the bound (cluster/statement_clock.py).
CUT = "longer than the cluster's bound"
# Seconds: the cut lasts longer (until the other cluster has finished the jobs). Long enough that
# the cut-off cluster stops what it runs (10 s after its last heartbeat) before its leases run out
# (at least 20 s after the cut), the rescuer taking them back after 15 s of silence.
LEASE = 30


def cannot(reason: str) -> None:
    """Skip with ``reason``, or fail when CI is "true"."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"cannot cut a host off, and CI is set: {reason}")
    pytest.skip(f"cannot cut a host off: {reason}")


def run(*command: str) -> None:
    proc = subprocess.run(command, capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited {proc.returncode}: {proc.stderr.strip()}")


@dataclass
class Namespace:
    """A network namespace whose one link leads to this machine's database server."""

    name: str
    host_link: str  # the veth end in the root namespace
    host_ip: str  # its address: the namespace's database HOST
    inside_ip: str
    server: tuple[str, int]  # where the server listens in the root namespace

    @property
    def exec(self) -> list[str]:
        return ["ip", "netns", "exec", self.name]

    def nat_rules(self) -> list[list[str]]:
        """The iptables rules (without -A/-D) that carry the namespace's connections to the server."""
        server_ip, port = self.server
        tag = ["-m", "comment", "--comment", f"taskmq-test-{self.name}"]
        return [
            ["-t", "nat", "PREROUTING", "-i", self.host_link, "-p", "tcp", "-d", self.host_ip, "--dport", str(port),
             *tag, "-j", "DNAT", "--to-destination", f"{server_ip}:{port}"],
            ["-t", "nat", "INPUT", "-p", "tcp", "-s", self.inside_ip, "-d", server_ip, "--dport", str(port),
             *tag, "-j", "SNAT", "--to-source", server_ip],
        ]

    def up(self) -> None:
        inside_link = f"{self.host_link}n"
        run("ip", "netns", "add", self.name)
        run("ip", "link", "add", self.host_link, "type", "veth", "peer", "name", inside_link)
        run("ip", "link", "set", inside_link, "netns", self.name)
        run("ip", "addr", "add", f"{self.host_ip}/30", "dev", self.host_link)
        run("ip", "link", "set", self.host_link, "up")
        run(*self.exec, "ip", "addr", "add", f"{self.inside_ip}/30", "dev", inside_link)
        run(*self.exec, "ip", "link", "set", inside_link, "up")
        run(*self.exec, "ip", "link", "set", "lo", "up")
        # A packet sent on to 127.0.0.1 from another interface is a "martian" unless this allows it.
        run("sysctl", "-qw", f"net.ipv4.conf.{self.host_link}.route_localnet=1")
        for rule in self.nat_rules():
            run("iptables", rule[0], rule[1], "-A", *rule[2:])

    def down(self) -> None:
        """Remove what :meth:`up` made (what exists of it); never raises."""
        for rule in self.nat_rules():
            with contextlib.suppress(Exception):
                run("iptables", rule[0], rule[1], "-D", *rule[2:])
        with contextlib.suppress(Exception):
            run("ip", "link", "del", self.host_link)  # its peer goes with it
        with contextlib.suppress(Exception):
            run("ip", "netns", "del", self.name)

    def cut(self) -> None:
        """Drop every packet in and out of the namespace: the host's network failed silently."""
        for chain in ("INPUT", "OUTPUT"):
            run(*self.exec, "iptables", "-I", chain, "-j", "DROP")

    def mend(self) -> None:
        for chain in ("INPUT", "OUTPUT"):
            run(*self.exec, "iptables", "-D", chain, "-j", "DROP")


def _server_address() -> tuple[str, int]:
    db = connections["default"].settings_dict
    host = db.get("HOST") or "127.0.0.1"
    if host.startswith("/"):
        cannot(f"the server is reached through a Unix socket ({host}), not TCP")
    address = socket.gethostbyname(host)
    with socket.socket() as probe:  # the server must listen on this machine, in this namespace
        try:
            probe.bind((address, 0))
        except OSError:
            cannot(f"the database server ({host}) is not on this machine")
    return address, int(db.get("PORT") or DEFAULT_PORT[connections["default"].vendor])


@pytest.fixture
def namespace() -> Iterator[Namespace]:
    if os.geteuid() != 0:
        cannot("network namespaces and iptables need root")
    for command in ("ip", "iptables", "sysctl"):
        if shutil.which(command) is None:
            cannot(f"{command} is not installed")
    pid = os.getpid()
    # A /30 of 10.213.0.0/16 and names of this run's own (interface names: at most 15 characters).
    base = ipaddress.ip_address("10.213.0.0") + (pid % 16384) * 4
    ns = Namespace(name=f"taskmq{pid}", host_link=f"tmq{pid % 10**8}", host_ip=str(base + 1),
                   inside_ip=str(base + 2), server=_server_address())
    ns.down()  # what a killed earlier run of this pid left
    try:
        ns.up()
    except RuntimeError as exc:
        ns.down()
        pytest.fail(f"setting up the network namespace failed: {exc}")
    try:
        yield ns
    finally:
        ns.down()
        # The server never heard that the cut-off connections died (its keepalive, 2 hours by
        # default, has not run out): end them, or the test database could not be dropped.
        _end_other_sessions()


def _end_other_sessions() -> None:
    with connections["default"].cursor() as cursor:
        if connections["default"].vendor == "postgresql":
            cursor.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                           "WHERE datname = current_database() AND pid <> pg_backend_pid()")
            return
        cursor.execute("SELECT ID FROM information_schema.PROCESSLIST WHERE DB = DATABASE() AND ID <> CONNECTION_ID()")
        for (session,) in cursor.fetchall():
            try:
                cursor.execute(f"KILL {int(session)}")
            except Exception:  # it ended meanwhile
                pass


def starts(log: list[tuple[str, str]], tag: str) -> collections.Counter:
    """Count the executions of each job (its ``start:<tag>`` lines in the run log)."""
    return collections.Counter(job_id for job_id, event in log if event.startswith(f"start:{tag} "))


def test_a_host_cut_off_longer_than_the_lease(cluster, namespace, tmp_path):
    cluster.configure(lease=LEASE)
    hold = tmp_path / "hold"  # the cut-off cluster's tasks run until this file exists
    cut_off = cluster.start("-w", "2", "-n", "cut-off", prefix=namespace.exec,
                            env={HOST_VARIABLE[connections["default"].vendor]: namespace.host_ip,
                                 "TASKMQ_TEST_HOLD": str(hold)})
    ids = enqueue_many("tests.cluster.tasks_cluster.held_in", [("first",)] * 6)
    # Mid-work: its two workers run a task each (and it holds the others, prefetched).
    cluster.wait_until(lambda: len(starts(cluster.log(), "first")) >= 2, "the cut-off cluster to start two tasks",
                       alive=[cut_off])
    assert job_states(ids) == {"RUNNING": 6}

    started_before = set(starts(cluster.log(), "first"))
    first_workers = {job_id: int(tag.split()[1]) for job_id, tag in cluster.log() if tag.startswith("start:first ")}
    namespace.cut()
    rescuer = cluster.start("-w", "3", "-n", "rescuer")
    rescuer_pids = set(cluster.wait_pool(rescuer, 3))
    # The rescuer takes every job once the cut-off cluster's heartbeat is silent for dead_after (or
    # its lease has run out), and finishes it. Whenever it has started one the cut-off cluster ran,
    # the cut-off worker that ran it is gone: it stopped its tasks halt_after seconds after its
    # last heartbeat, before the rescuer could take them (no job runs in two places at once).
    overlaps: list[tuple[str, int]] = []

    def rescued() -> bool:
        rescuer_runs = [j for j, tag in cluster.log() if tag.startswith("start:first ") and int(tag.split()[1])
                        in rescuer_pids]
        overlaps.extend((j, first_workers[j]) for j in rescuer_runs if j in first_workers
                        and is_alive(first_workers[j]))
        return job_states(ids) == {"SUCCEEDED": 6}

    cluster.wait_until(lambda: rescued() or overlaps, "the rescuer to finish every job", alive=[cut_off, rescuer])
    assert not overlaps, f"a job ran in both clusters at once: {overlaps}\n{cut_off.output()}"
    assert job_states(ids) == {"SUCCEEDED": 6}
    # The cut-off cluster noticed that its connections were dead (no answer, no reset) and said so,
    # and keeps its running tasks: its own processes' statements ran past the statement bound (a
    # sixth of the lease), were cut, and each component logged that it reconnects.
    reconnecting = RECONNECTING[connections["default"].vendor]
    cluster.wait_until(lambda: CUT in cut_off.output(tail=10**7) and reconnecting in cut_off.output(tail=10**7),
                       lambda: f"the cut-off cluster to log its dead connection:\n{cut_off.output()}", alive=[cut_off])
    assert "Traceback" not in cut_off.output(tail=10**7)
    assert sum(1 for pid in cut_off.children() if pid) == 5, "its workers, pusher, monitor and scheduler live on"

    # Without a heartbeat for halt_after it stopped what it ran and starts nothing it holds.
    output = cut_off.output(tail=10**7)
    assert f"): stopped its {len(started_before)} running task(s) before other clusters may take them over" in output
    assert "leases not renewed" in output
    namespace.mend()
    hold.touch()
    rescuer.send(signal.SIGTERM)
    assert rescuer.wait() == 0, rescuer.output()

    # Served again without a restart: new work goes to the cut-off cluster (the only one left).
    later = enqueue_many("tests.cluster.tasks_cluster.held_in", [("later",)] * 4)
    cluster.wait_final(later, alive=[cut_off])
    assert job_states(later) == {"SUCCEEDED": 4}
    assert {job.cluster for job in jobs(later).values()} == {"cut-off"}
    cluster.wait_until(lambda: "database is back after" in cut_off.output(tail=10**7),
                       "the cut-off cluster to say the database is back", alive=[cut_off])

    # Each first job ended once, as the rescuer recorded it: its result is a rescuer worker's pid.
    first = jobs(ids)
    assert {job.state for job in first.values()} == {"SUCCEEDED"}
    assert {job.cluster for job in first.values()} == {"rescuer"}
    assert {job.result for job in first.values()} <= rescuer_pids, (first, rescuer_pids)
    # The cut-off cluster started nothing more once its leases were in doubt: only what it ran at
    # the cut ran twice (at least once, as after a crash); what it held unstarted, it gave back.
    executions = starts(cluster.log(), "first")
    assert set(executions) == set(ids)
    assert executions == {job_id: 2 if job_id in started_before else 1 for job_id in ids}
    output = cut_off.output(tail=10**7)
    assert "starting no waiting task and claiming nothing until the database answers" in output
    assert f"giving back {6 - len(started_before)} unstarted task(s)" in output
    assert "finished after its lease was lost; not recorded" not in output  # it stopped them first
    cut_off.send(signal.SIGTERM)
    assert cut_off.wait() == 0, cut_off.output()
