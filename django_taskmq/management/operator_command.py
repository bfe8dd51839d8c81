"""The base of the operator's commands (``qinfo``, ``qdead``, ``qmonitor``, ``qprune``, ``qcancel``):
they speak, they never print a traceback.

* A database error becomes one line naming the cause and the fix (:func:`.database_problem.explain`:
  the database does not answer, a table is missing, migrations are not applied) and exit status 1.
* A closed pipe (``manage.py qinfo | head -1``) ends the command quietly with exit status 0, as
  ``cat`` and ``grep`` do: the reader has what it wanted.
"""

from __future__ import annotations

import os
import sys

from django.core.management.base import BaseCommand, CommandError

from ..conf import get_settings
from ..brokers.problems import explain
from ..brokers.outage import is_database_error


class OperatorCommand(BaseCommand):
    """A management command whose database errors and closed pipes are one line, not a traceback."""

    def execute(self, *args, **options):
        try:
            output = super().execute(*args, **options)
            self.stdout.flush()  # a closed pipe shows here, not at the interpreter's exit
            return output
        except BrokenPipeError:
            _quiet_stdout()
            raise SystemExit(0) from None
        except CommandError:
            raise
        except Exception as exc:
            if not is_database_error(exc):
                raise
            raise CommandError(explain(get_settings().database, exc), returncode=1) from None


def _quiet_stdout() -> None:
    """Point stdout at /dev/null: Python flushes it again at exit, which would raise once more."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # no file descriptor (a StringIO in tests): nothing to flush at exit
        pass
