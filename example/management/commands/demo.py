"""Enqueue a mixed batch of example tasks, run a real cluster until they are done, print a summary."""

import subprocess
import sys
import time

from django.core.management.base import BaseCommand
from django.db.models import Count

from django_taskmq import Priority, async_task, enqueue_many
from django_taskmq import async_chain
from django_taskmq.models import Job
from example.tasks import build_report, send_welcome


class Command(BaseCommand):
    help = "Run the django_taskmq demo: enqueue example tasks, run qcluster --burst, show the result."

    def add_arguments(self, parser):
        parser.add_argument("-n", type=int, default=200, help="how many report jobs to enqueue in bulk")

    def handle(self, *args, **options):
        started = time.time()
        Job.objects.all().delete()
        first = async_task("example.tasks.add", 2, 3, priority=Priority.LOW)
        for i in range(5):
            send_welcome.delay(f"user{i}@example.com")
        enqueue_many(build_report, [(i,) for i in range(options["n"])])
        key = f"demo-answer-{started}"
        answer = async_task("example.tasks.add", 40, 2, priority=Priority.CRITICAL, key=key)
        again = async_task("example.tasks.add", 40, 2, priority=Priority.CRITICAL, key=key)
        async_task("example.tasks.flaky", "retry demo", priority=Priority.HIGH)
        async_chain([("example.tasks.add", (1, 1)), ("example.tasks.add", (2, 2))])
        self.stdout.write(f"enqueued {Job.objects.count()} jobs; running `manage.py qcluster --burst` ...")
        subprocess.run([sys.executable, sys.argv[0], "qcluster", "--burst"], check=True)
        self.stdout.write("\nstate      count")
        for row in Job.objects.values("state").annotate(n=Count("id")).order_by("state"):
            self.stdout.write(f"{row['state']:<10} {row['n']}")
        order = list(Job.objects.exclude(started_at=None).order_by("started_at").values_list("task_name", "priority")[:8])
        self.stdout.write("\nfirst jobs started (task, priority): " + ", ".join(f"{t.rsplit('.', 1)[-1]}({p})" for t, p in order))
        self.stdout.write(f"add(2, 3) = {Job.objects.get(pk=first).result} (LOW priority, so it ran last)")
        self.stdout.write(f"add(40, 2) = {Job.objects.get(pk=answer).result} (CRITICAL; the same key twice gave "
                          f"{'one job' if answer == again else 'two jobs!'})")
        flaky = Job.objects.get(func="example.tasks.flaky")
        self.stdout.write(f"flaky: {flaky.state} after {flaky.deliveries} deliveries -> {flaky.result!r}")
        self.stdout.write(self.style.SUCCESS(f"demo done in {time.time() - started:.1f}s"))
