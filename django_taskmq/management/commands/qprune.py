"""``manage.py qprune``: delete now what the running clusters delete over time: finished jobs older
than their ``TASKMQ['retention']`` (with their dead letters) and successes beyond ``save_limit``;
``--dry-run`` counts them instead."""

from django.core.management.base import CommandError

from django_taskmq.brokers import get_broker
from django_taskmq.conf import get_settings
from django_taskmq.exceptions import ConfigError
from django_taskmq.management.operator_command import OperatorCommand
from django_taskmq.models import Job, State
from django_taskmq.policy import retention as retention_policy

BATCH = 500  # jobs deleted per transaction


class Command(OperatorCommand):
    help = ("Delete finished jobs older than TASKMQ['retention'] (with their dead letters) and successes beyond "
            "save_limit, in small batches; --dry-run counts them.")

    def add_arguments(self, parser):
        parser.add_argument("--dry-run", action="store_true", help="count what would be deleted; delete nothing")

    def handle(self, *args, dry_run=False, **options):
        try:
            settings = get_settings()
        except ConfigError as exc:
            raise CommandError(str(exc)) from exc
        broker = get_broker()
        cutoffs = retention_policy.cutoffs(settings.retention, broker.now())
        verb = "would delete" if dry_run else "deleted"
        total = 0
        for key, state in retention_policy.STATES.items():
            seconds = settings.retention[key]
            if seconds is None:
                self.stdout.write(f"{key:<10} kept for ever (TASKMQ['retention']['{key}'] is None)")
                continue
            before = cutoffs[state]
            if dry_run:
                count = broker.count_finished(state.value, before)
            else:
                count = 0
                while step := broker.delete_finished(state.value, before, BATCH):
                    count += step
            total += count
            self.stdout.write(f"{key:<10} {verb} {count} job(s) finished more than {_days(seconds)} ago")
        if settings.save_limit > 0:
            if dry_run:
                beyond = max(Job.objects.using(settings.database).filter(state=State.SUCCEEDED).count()
                             - settings.save_limit, 0)
            else:
                beyond = 0
                while step := broker.prune(settings.save_limit):
                    beyond += step
            total += beyond
            self.stdout.write(f"succeeded  {verb} {beyond} job(s) beyond the newest {settings.save_limit} "
                              f"(save_limit)")
        if not dry_run and total:
            broker.chore_done(retention_policy.CHORE, total)
        self.stdout.write(f"total      {verb} {total} job(s)")


def _days(seconds: float) -> str:
    return f"{seconds / 86400:g} day(s)" if seconds >= 86400 else f"{seconds:g} s"
