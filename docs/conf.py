"""Sphinx configuration for the django_taskmq documentation."""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["DJANGO_SETTINGS_MODULE"] = "example.settings"

import django  # noqa: E402

django.setup()

import django_taskmq  # noqa: E402

project = "django_taskmq"
author = "django_taskmq contributors"
copyright = "django_taskmq contributors"
release = django_taskmq.__version__  # written once, in django_taskmq/__init__.py
version = ".".join(release.split(".")[:2])

extensions = ["sphinx.ext.autodoc", "sphinx.ext.intersphinx"]


def offline_inventory(source: Path, target: Path) -> str:
    """Write ``source`` (one "name domain:role uri title" a line) as an intersphinx inventory."""
    import zlib

    lines = [line.split(" ", 3) for line in source.read_text().splitlines() if line and not line.startswith("#")]
    body = "".join(f"{name} {role} 1 {uri} {title}\n" for name, role, uri, title in lines)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(b"# Sphinx inventory version 2\n# Project: Django\n# Version: stable\n"
                       b"# The remainder of this file is compressed using zlib.\n" + zlib.compress(body.encode()))
    return str(target)


# Django's inventory from its site; without network (CI has none) the few targets these docs use,
# from docs/_intersphinx/django.txt, so that a build with -W passes offline too.
DJANGO_DOCS = "https://docs.djangoproject.com/en/stable/"
intersphinx_mapping = {
    "django": (DJANGO_DOCS, (f"{DJANGO_DOCS}_objects/",
                             offline_inventory(ROOT / "docs" / "_intersphinx" / "django.txt",
                                               ROOT / "docs" / "_build" / "intersphinx" / "django.inv"))),
}
intersphinx_timeout = 5

autodoc_typehints = "none"
autodoc_member_order = "bysource"
autodoc_preserve_defaults = True
autodoc_default_options = {"undoc-members": False}
add_module_names = False

exclude_patterns = ["_build"]
templates_path = []
html_static_path = []
html_theme = "alabaster"
html_title = f"django_taskmq {release}"
# Read the Docs adds its version switcher (flyout) to every theme; html_baseurl makes canonical links
# point at the version being read.
html_baseurl = os.environ.get("READTHEDOCS_CANONICAL_URL", "")


def setup(app):
    # Django's docs define :setting: (std:setting); declaring it here lets :setting:`DATABASES` resolve
    # through intersphinx to Django's settings reference.
    app.add_crossref_type("setting", "setting", indextemplate="pair: %s; setting")
