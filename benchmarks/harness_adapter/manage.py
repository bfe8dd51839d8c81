#!/usr/bin/env python
"""manage.py of the harness adapter's project: ``manage.py qcluster`` is the cluster the harness measures."""

import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "harness_project.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
