"""Sphinx configuration for the django_taskmq documentation."""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["DJANGO_SETTINGS_MODULE"] = "example.settings"

import django  # noqa: E402

django.setup()

project = "django_taskmq"
author = "django_taskmq contributors"
copyright = "django_taskmq contributors"
release = "0.1.0"
version = "0.1"

extensions = ["sphinx.ext.autodoc"]

autodoc_typehints = "none"
autodoc_member_order = "bysource"
autodoc_preserve_defaults = True
autodoc_default_options = {"undoc-members": False}
add_module_names = False

exclude_patterns = ["_build"]
templates_path = []
html_static_path = []
html_theme = "alabaster"
html_title = "django_taskmq 0.1.0"
