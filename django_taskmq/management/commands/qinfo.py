from datetime import timedelta

from django.core.management.base import BaseCommand
from django.utils import timezone

from django_taskmq.brokers import get_broker
from django_taskmq.conf import get_settings
from django_taskmq.models import Cluster


class Command(BaseCommand):
    help = "Show running clusters (their heartbeats) and the broker's counts per queue and priority."

    def handle(self, *args, **options):
        fresh = timezone.now() - timedelta(seconds=30)
        clusters = Cluster.objects.using(get_settings().database).filter(beat_at__gte=fresh).exclude(state="stopped")
        self.stdout.write(f"clusters alive: {clusters.count()}")
        for c in clusters:
            counts = ", ".join(f"{k} {v}" for k, v in c.counts.items())
            self.stdout.write(f"  {c.name} {c.host}:{c.pid} {c.state} workers={c.workers} queues={','.join(c.queues)} {counts}")
        self.stdout.write(f"{'queue':<16}{'priority':>9}{'ready':>8}{'delayed':>9}{'reserved':>10}{'dead':>7}")
        for row in get_broker().stats():
            self.stdout.write(f"{row['queue']:<16}{row['priority']:>9}{row['ready']:>8}{row['delayed']:>9}"
                              f"{row['reserved']:>10}{row['dead']:>7}")
