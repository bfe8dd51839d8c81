"""Forking the cluster's children and ending them: what every child does first (die with the
sentinel, close the pipe ends that are not its own), the garbage collector frozen across the fork,
the kill, and the signal that tells a worker to look at its cancellation marks.
"""

from __future__ import annotations

import functools
import gc
import os
import signal
from collections.abc import Callable, Sequence
from multiprocessing.context import ForkContext
from multiprocessing.process import BaseProcess
from typing import Any

from .. import FROZEN_AT_IMPORT
from . import worker
from .slots import Process


def fork(ctx: ForkContext, target: Callable[..., None], args: tuple, name: str, foreign: Sequence[Any]) -> BaseProcess:
    """Start a child running ``target(*args)``; it closes the ``foreign`` pipe ends first (each has a
    ``close()``), so a pipe reports EOF as soon as its real peer dies."""
    process = ctx.Process(target=_child, args=(target, args, list(foreign)), name=name, daemon=False)
    _warm_orm()
    # Frozen, the objects the child inherits are left out of its garbage collections: a full
    # collection would otherwise write to every one of them, copying the whole inherited heap.
    # gc.unfreeze() would thaw what the project froze too (more than the interpreter's own).
    frozen_by_the_project = gc.get_freeze_count() > FROZEN_AT_IMPORT
    gc.freeze()
    try:
        process.start()
    finally:
        if not frozen_by_the_project:
            gc.unfreeze()  # the sentinel's own collections go on as before
    return process


@functools.cache
def _warm_orm() -> None:
    """Fill, once and before the first fork, what Django's ORM otherwise fills at the first query of
    each process: the SQL compiler's module (imported on first use) and the models' cached metadata
    (``_meta`` and field properties such as the relation tree, computed over every model).

    Each child would compute them for itself after the fork: an import writes to ``sys.modules``
    and the interned strings, the relation tree to every model's ``_meta``, and every such write
    copies an inherited page (about 1 MiB a process, see "Memory" in docs/performance.rst).
    No query runs; a connection that a project's own field opens on the way is closed again, as
    the sentinel closed its own before forking.
    """
    from django.apps import apps
    from django.db import connections
    from django.utils.functional import cached_property

    for alias in connections:
        connections[alias].ops.compiler("SQLCompiler")

    names: dict[type, list[str]] = {}  # each type's cached properties, listed once

    def fill(obj: Any) -> None:
        klass = type(obj)
        if klass not in names:
            # (Not what only validation uses: slow to fill, never used by a cluster's queries.)
            names[klass] = [name for k in klass.__mro__ for name, value in vars(k).items()
                            if isinstance(value, cached_property) and name not in ("validators", "error_messages")]
        for name in names[klass]:
            try:
                getattr(obj, name)
            except Exception:  # a property that does not apply to this object
                pass

    was_open = {c.alias for c in connections.all(initialized_only=True) if c.connection is not None}
    for model in apps.get_models(include_auto_created=True):
        fill(model._meta)
        for field in model._meta.get_fields(include_hidden=True):
            fill(field)
    for connection in connections.all(initialized_only=True):
        if connection.connection is not None and connection.alias not in was_open:
            connection.close()  # a child must not share the sentinel's socket


def signal_cancel(process: Process) -> None:
    """Tell a worker with one thread to look at its cancellation marks (see worker.CANCEL_SIGNAL)."""
    if process.pid is not None:
        try:
            os.kill(process.pid, worker.CANCEL_SIGNAL)
        except ProcessLookupError:
            pass  # it died: the guard sees it


def pid_gone(pid: int) -> bool:
    """Whether no process ``pid`` lives on this host (none, or a zombie waiting to be reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            # "pid (comm) state ...": comm may hold spaces and parentheses
            return stat.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True
    except OSError:  # no /proc here: ask the kernel whether the pid exists
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            pass
        return False


def terminate(process: Process) -> None:
    """Ask ``process`` to end (SIGTERM) if it lives; do not wait."""
    if process.is_alive() and process.pid is not None:
        try:
            os.kill(process.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass


def kill(process: Process) -> None:
    """Kill ``process`` (SIGKILL) if it lives, and reap it."""
    if process.is_alive() and process.pid is not None:
        try:
            os.kill(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    process.join(timeout=1)


def _child(target: Callable[..., None], args: tuple, foreign: list[Any]) -> None:
    """Entry point of every child process: die with the sentinel, drop foreign pipes, run ``target``."""
    _die_with_parent()
    for pipe in foreign:
        try:
            pipe.close()
        except OSError:
            pass
    target(*args)


def _die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when the sentinel dies (no orphans after a kill -9).

    The leases of whatever the cluster held bring that work back. Elsewhere this is a no-op and
    the pipes' EOF ends the children instead.
    """
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass
