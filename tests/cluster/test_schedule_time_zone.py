"""A real cluster fires a schedule named in a time zone when it is due, and moves it to its next
run read in that zone (not in TIME_ZONE, which is UTC in the test settings)."""

from __future__ import annotations

import datetime
import signal
from zoneinfo import ZoneInfo

import pytest
from django.utils import timezone

from django_taskmq import schedule
from django_taskmq.models import Job, Schedule

pytestmark = [pytest.mark.cluster, pytest.mark.django_db(transaction=True)]


def test_a_cluster_fires_a_berlin_schedule_due_now(cluster):
    cluster.configure(scheduler_interval=0.2)
    berlin = ZoneInfo("Europe/Berlin")
    now = timezone.now()
    schedule("tests.tasks.record_run", "berlin", name="berlin-9", schedule_type=Schedule.CRON, cron="0 9 * * *",
             tz="Europe/Berlin", next_run=now - datetime.timedelta(seconds=1))
    qc = cluster.start("-w", "1")
    cluster.wait_until(lambda: Schedule.objects.get(name="berlin-9").next_run > now, "the schedule to fire",
                       alive=[qc])
    (job_id,) = Job.objects.filter(task_name="berlin-9").values_list("pk", flat=True)
    cluster.wait_final([job_id], alive=[qc])
    qc.send(signal.SIGTERM)
    assert qc.wait() == 0, qc.output()

    assert Job.objects.get(pk=job_id).state == "SUCCEEDED"
    following = Schedule.objects.get(name="berlin-9").next_run.astimezone(berlin)
    assert (following.hour, following.minute) == (9, 0)  # 09:00 in Berlin: 07:00 or 08:00 UTC
    assert now.astimezone(berlin) < following <= now.astimezone(berlin) + datetime.timedelta(days=1)
    assert [tag for _, tag in cluster.log()] == ["berlin"]
