"""``qcluster --run-once``, the name django-q2 scripts use, is ``--burst``: it drains what is ready and exits."""

from __future__ import annotations

import pytest

from django_taskmq import async_task
from django_taskmq.models import Job
from tests.cluster.conftest import DEADLINE

pytestmark = [pytest.mark.cluster, pytest.mark.django_db(transaction=True)]


def test_run_once_drains_what_is_ready_and_exits(cluster):
    ids = [async_task("tests.tasks.record_run", f"once-{i}") for i in range(3)]
    qc = cluster.start("--run-once", "-w", "1")
    assert qc.proc.wait(timeout=DEADLINE) == 0, qc.output()
    assert sorted(tag for _, tag in cluster.log()) == ["once-0", "once-1", "once-2"]
    assert set(Job.objects.filter(pk__in=ids).values_list("state", flat=True)) == {"SUCCEEDED"}
