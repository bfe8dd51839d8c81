"""Packages as release 0.1 queued them, for the tests of what this release still runs of them."""

from __future__ import annotations

from typing import Any

from django_taskmq import async_task
from django_taskmq.conf import get_settings
from django_taskmq.envelope import Envelope, sign
from django_taskmq.models import Job
from django_taskmq.options import JobTemplate


def queue_chained(func: str, args: tuple, chain: list[tuple[str, tuple, dict, dict]], **options: Any) -> str:
    """Queue ``func(*args)`` with the 0.1 ``chain`` key in its signed package: the links after it,
    each ``(func path, args, kwargs, options)``, as 0.1's compat ``async_task(chain=...)`` stored them."""
    job_id = async_task(func, *args, **options)
    settings = get_settings()
    run_options = JobTemplate(func, options, settings).run_options  # what the package says of its own run
    envelope = Envelope(func=func, args=tuple(args), kwargs={}, options={**run_options, "chain": chain})
    payload = sign(envelope, settings.name, settings.compress, settings.max_package_size)
    Job.objects.using(settings.database).filter(pk=job_id).update(payload=payload)
    return job_id
