"""Deprecated: moved to :mod:`django_taskmq.brokers.outage` (see ``django_taskmq.MOVED``)."""

from django_taskmq import _moved_here

_moved_here(__name__)
