"""Deprecated: moved to :mod:`django_taskmq.workflows` (see ``django_taskmq.MOVED``)."""

from django_taskmq import _moved_here

_moved_here(__name__)
