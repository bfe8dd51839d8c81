"""A cluster dead-letters a stored call its function cannot take at once: the binding's TypeError is
no failure of the task, so no delivery is retried (it used to fail max_deliveries times)."""

from __future__ import annotations

import pytest

from django_taskmq import async_task
from django_taskmq.brokers import get_broker
from django_taskmq.conf import get_settings
from django_taskmq.models import DeadLetter, Job
from django_taskmq.options import JobTemplate

pytestmark = [pytest.mark.cluster, pytest.mark.django_db(transaction=True)]


def test_a_call_that_does_not_fit_goes_straight_to_the_dead_letter_queue(cluster):
    # Stored without the caller's check, as a job imported from django-q2 or written before its function changed.
    template = JobTemplate("tests.tasks.record_run", {"max_deliveries": 5}, get_settings(), check_calls=False)
    bad = get_broker().enqueue(template.values(("tag", "extra"), {}), key=None)
    good = async_task("tests.tasks.record_run", "good")
    cluster.burst("-w", "1")
    job = Job.objects.get(pk=bad)
    assert (job.state, job.deliveries) == ("DEAD", 1)
    assert "tests.tasks.record_run() too many positional arguments" in DeadLetter.objects.get(job=job).reason
    assert Job.objects.get(pk=good).state == "SUCCEEDED"
    assert [tag for _, tag in cluster.log()] == ["good"]
