#!/usr/bin/env python
"""manage.py of the benchmark's oban_project (run with the matching venv's python)."""

import os
import sys
from pathlib import Path

# benchmarks/ holds the shared task module (benchtasks) and the DATABASES helper (benchdb).
sys.path.insert(1, str(Path(__file__).resolve().parents[2]))

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "oban_project.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
