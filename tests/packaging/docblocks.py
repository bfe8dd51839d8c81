"""Extract the code blocks of a README or a docs page, and run them in order as a reader would.

What counts as a block:

* Markdown: fenced blocks marked ``python``, ``sh``, ``bash`` or ``console``.
* reStructuredText: ``.. code-block:: python`` (or ``sh``, ``bash``, ``console``) and the ``::``
  literal blocks, which are shell commands. ``.. code-block:: text`` (or any other language) is
  shown, not run.

How each is run (one working directory carried from block to block, as a reader's shell):

* A Python block whose first line is a comment naming a ``.py`` file (``# mysite/settings.py``,
  maybe followed by more words) is appended to that file, created if it is missing.
* Any other Python block runs in ``python manage.py shell -c`` from the current directory.
* A shell block runs in ``bash -e``; a ``cd`` in it moves the directory for the blocks after it.
  ``django-taskmq`` in a ``pip install`` line is the wheel under test. Commands that run until
  they are stopped (``qcluster`` without ``--burst``, ``qmonitor``, ``runserver``) run for a few
  seconds and are stopped with Ctrl-C (SIGINT), which must end them with status 0.
* A block after an ``.. not run: REASON`` comment is shown only (say why: it needs a server of
  the reader's, say).
* Blocks about the repository itself (``./scripts/...``, ``pip install -e``, ``tox``) are left to
  ``scripts/test``, which runs them.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

RUNNABLE = {"python": "python", "sh": "sh", "bash": "sh", "console": "sh", "shell": "sh"}
FILE_COMMENT = re.compile(r"#\s*([\w./-]+\.py)\b")
REPOSITORY = re.compile(r"\./scripts/|pip install[^\n]*\s-e\s|^\s*tox\b|\.venv/bin/", re.M)
LONG_RUNNING = re.compile(r"^(\s*)(python3? manage\.py (?:qcluster(?![^\n#]*--burst)|qmonitor|runserver)\b[^\n#]*)",
                          re.M)
STOP_AFTER = 6  # seconds a long-running command runs before its Ctrl-C
# A terminal's Ctrl-C: one SIGINT to the command's process group (its own, with job control on).
# (GNU timeout would signal the command twice, once directly and once through the group.)
CTRL_C = """ctrl_c_after() {
    local seconds="$1"; shift
    set -m; "$@" & local pid=$!; set +m
    sleep "$seconds"; kill -INT -- "-$pid"; wait "$pid"
}
"""


@dataclass
class Block:
    language: str  # "python", "sh", or "shown" (after a ``.. not run:`` comment)
    code: str
    line: int  # where it starts in its document, for messages

    @property
    def file(self) -> str | None:
        """The file a Python block is written to, from its first line's comment."""
        first = self.code.lstrip().splitlines()[0] if self.code.strip() else ""
        match = FILE_COMMENT.match(first)
        return match.group(1) if self.language == "python" and match else None

    @property
    def about_the_repository(self) -> bool:
        return self.language == "sh" and bool(REPOSITORY.search(self.code))


def markdown_blocks(text: str) -> list[Block]:
    blocks, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        match = re.match(r"^```(\w*)\s*$", lines[i])
        if match:
            start, body = i + 1, []
            i += 1
            while not lines[i].startswith("```"):
                body.append(lines[i])
                i += 1
            if match.group(1) in RUNNABLE:
                blocks.append(Block(RUNNABLE[match.group(1)], "\n".join(body) + "\n", start + 1))
        i += 1
    return blocks


def _indented_body(lines: list[str], start: int, indent: int) -> tuple[str, int]:
    """Return the block indented deeper than ``indent`` from ``start`` (blank lines allowed) and
    the index after it."""
    body, i = [], start
    while i < len(lines) and (not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > indent):
        body.append(lines[i])
        i += 1
    while body and not body[-1].strip():
        body.pop()
    deepest = min((len(b) - len(b.lstrip()) for b in body if b.strip()), default=0)
    return "\n".join(b[deepest:] for b in body) + "\n", i


def rst_blocks(text: str) -> list[Block]:
    blocks, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        line = lines[i]
        indent = len(line) - len(line.lstrip())
        directive = re.match(r"\s*\.\. code-block::\s*(\w+)", line)
        if line.strip().startswith(".. not run:"):  # the next block is shown only; the comment says why
            j = i + 1
            while j < len(lines) and not lines[j].strip():
                j += 1
            _, i = _indented_body(lines, j + 1, len(lines[j]) - len(lines[j].lstrip()))
            blocks.append(Block("shown", "", j + 1))
            continue
        if directive:
            j = i + 1
            while j < len(lines) and lines[j].strip().startswith(":"):  # options
                j += 1
            code, end = _indented_body(lines, j, indent)
            if directive.group(1) in RUNNABLE:
                blocks.append(Block(RUNNABLE[directive.group(1)], code, i + 1))
            i = end
            continue
        if line.rstrip().endswith("::") and not line.lstrip().startswith(".."):
            code, end = _indented_body(lines, i + 1, indent)
            if code.strip():
                blocks.append(Block("sh", code, i + 2))
            i = end
            continue
        i += 1
    return blocks


def blocks_of(path: Path) -> list[Block]:
    text = path.read_text()
    return markdown_blocks(text) if path.suffix == ".md" else rst_blocks(text)


def shell_code(block: Block, wheel: Path) -> str:
    """The block as bash runs it: the wheel for the package, long-running commands stopped by Ctrl-C."""
    code = re.sub(r"""(pip install[^\n]*?\s)(["']?)django-taskmq(\[[\w,]+\])?\2(?=\s|$)""",
                  lambda m: f'{m.group(1)}"{wheel}{m.group(3) or ""}"', block.code)
    return CTRL_C + LONG_RUNNING.sub(lambda m: f"{m.group(1)}ctrl_c_after {STOP_AFTER} {m.group(2)}", code)


def run_document(path: Path, where: Path, env: dict[str, str], wheel: Path, timeout: float = 300) -> list[str]:
    """Run ``path``'s blocks in order from the directory ``where``; return a log line per block.

    Raises AssertionError with the block, its line and its output at the first block that fails."""
    cwd, log = where, []
    for block in blocks_of(path):
        label = f"{path.name}:{block.line}"
        if block.language == "shown":
            log.append(f"{label} not run (the page says why)")
            continue
        if block.about_the_repository:
            log.append(f"{label} skipped (the repository's own commands)")
            continue
        if block.file:
            target = cwd / block.file
            assert target.parent.is_dir(), f"{label}: {block.file} has no directory {target.parent}"
            with target.open("a") as out:
                out.write("\n" + block.code)
            log.append(f"{label} appended to {block.file}")
            continue
        if block.language == "python":
            args = ["python", "manage.py", "shell", "-c", block.code]
        else:
            marker = where / ".cwd"
            args = ["bash", "-e", "-c", f"{shell_code(block, wheel)}\npwd > {marker}"]
        done = subprocess.run(args, cwd=str(cwd), env=env, text=True, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, timeout=timeout, stdin=subprocess.DEVNULL)
        if done.returncode != 0 or "Traceback" in done.stdout:
            raise AssertionError(f"{label} exited {done.returncode} in {cwd}:\n{block.code}\n--- output:\n{done.stdout}")
        if block.language == "sh":
            cwd = Path((where / ".cwd").read_text().strip())
        log.append(f"{label} ran ({block.language})")
    return log
