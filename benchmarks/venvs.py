"""Create and refresh the virtual environments under ``.work/`` (stdlib only)."""

from __future__ import annotations

import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections import deque
from pathlib import Path

from systems import WORK_DIR, VenvSpec

MARKER = ".bench-fingerprint.json"


def fingerprint(spec: VenvSpec, python: str) -> dict:
    """Return what decides a venv's content; a change means reinstall."""
    files = {}
    for path in spec.fingerprint_files:
        files[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None
    return {"python": python, "requirements": list(spec.requirements), "files": files}


def _version(python: str) -> tuple[int, int] | None:
    try:
        out = subprocess.run([python, "-c", "import sys; print(*sys.version_info[:2])"],
                             capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    major, minor = out.split()
    return int(major), int(minor)


def interpreter(spec: VenvSpec, python: str) -> str:
    """Return ``python``, or a newer interpreter when ``spec`` needs one (``min_python``).

    Looked for as ``python3.X`` on the PATH, then under pyenv's versions (``PYENV_ROOT``,
    default ``~/.pyenv``); the oldest series that suffices wins, so the peer runs on the
    Python closest to the others'.
    """
    need = spec.min_python
    if need is None or (_version(python) or (0, 0)) >= need:
        return python
    root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    for minor in range(need[1], need[1] + 6):
        found = shutil.which(f"python{need[0]}.{minor}")
        candidates = ([found] if found else []) + sorted(
            glob.glob(f"{root}/versions/{need[0]}.{minor}.*/bin/python"), reverse=True)
        for candidate in candidates:
            if (_version(candidate) or (0, 0)) >= need:
                return candidate
    raise RuntimeError(f"venv-{spec.name} needs Python {need[0]}.{need[1]}+; none found on the PATH "
                       f"or under {root}/versions")


def ensure(spec: VenvSpec, python: str = sys.executable, reinstall: bool = False,
           log=print) -> Path:
    """Make sure ``spec``'s venv exists and is current; return its python.

    ``reinstall`` re-runs pip with ``--upgrade`` (e.g. to pick up a new django-q2
    release); otherwise a venv whose fingerprint matches is used as it is.
    """
    python = interpreter(spec, python)
    marker = spec.path / MARKER
    wanted = fingerprint(spec, python)
    if not reinstall and spec.python.exists() and marker.exists():
        if json.loads(marker.read_text()) == wanted:
            return spec.python
    log_path = WORK_DIR / "logs" / f"pip-{spec.name}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    if not spec.python.exists():
        log(f"creating venv {spec.path} with {python}")
        _run([python, "-m", "venv", str(spec.path)], log_path)
    log(f"installing into venv-{spec.name}: {' '.join(spec.requirements)} (log: {log_path})")
    _run([str(spec.python), "-m", "pip", "install", "--upgrade", *spec.requirements], log_path)
    marker.write_text(json.dumps(wanted, indent=1))
    return spec.python


def compile_tree(spec: VenvSpec, package: Path) -> None:
    """Write the bytecode of an editable install's ``package``, as pip does for the peers.

    pip compiles what it installs into site-packages; an editable tree only gets ``.pyc``
    files when Python writes them on import, which ``PYTHONDONTWRITEBYTECODE`` (set on some
    machines and in many Docker images) prevents: every cluster start would compile
    django_taskmq from source while the peers load bytecode.
    """
    _run([str(spec.python), "-m", "compileall", "-q", str(package)],
         WORK_DIR / "logs" / f"compile-{spec.name}.log")


def _run(argv: list[str], log_path: Path) -> None:
    with open(log_path, "a") as log:
        log.write(f"\n$ {' '.join(argv)}\n")
        log.flush()
        result = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT)
    if result.returncode != 0:
        with open(log_path) as f:
            tail = "".join(deque(f, maxlen=30))
        raise RuntimeError(f"command failed ({result.returncode}): {' '.join(argv)}\n{tail}")
