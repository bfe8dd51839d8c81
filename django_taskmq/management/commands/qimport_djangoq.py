"""``manage.py qimport_djangoq``: carry django-q2's schedules, queued tasks and (``--history``)
finished tasks over (see :mod:`django_taskmq.compat.djangoq_import`)."""

from django.conf import settings as django_settings
from django.core.management.base import BaseCommand, CommandError

from django_taskmq.brokers import get_broker
from django_taskmq.compat.djangoq_import import Importer
from django_taskmq.conf import get_settings
from django_taskmq.exceptions import ConfigError


class Command(BaseCommand):
    help = ("Import django-q2's schedules and queued tasks (and with --history its finished tasks) from its "
            "tables; django-q2 need not be installed. Running it again imports nothing twice.")

    def add_arguments(self, parser):
        q_cluster = getattr(django_settings, "Q_CLUSTER", None) or {}
        parser.add_argument("--database", default=q_cluster.get("orm") or "default",
                            help="the database alias that holds django-q2's tables; default Q_CLUSTER['orm'] "
                                 "or 'default'")
        parser.add_argument("--name", default=q_cluster.get("name") or "default",
                            help="django-q2's cluster name, the salt of its signed packages; default "
                                 "Q_CLUSTER['name'] or 'default'")
        parser.add_argument("--history", action="store_true",
                            help="also import finished tasks (django_q_task), as finished jobs without results")
        parser.add_argument("--dry-run", action="store_true", help="say what would be imported; change nothing")

    def handle(self, *args, database, name, history, dry_run, **options):
        if database not in django_settings.DATABASES:
            raise CommandError(f"--database {database!r} is not in DATABASES {sorted(django_settings.DATABASES)}")
        try:
            settings = get_settings()
        except ConfigError as exc:
            raise CommandError(str(exc)) from exc
        report = Importer(get_broker(), settings, source=database, name=name, history=history,
                          dry_run=dry_run).run()
        for line in report.lines(dry_run):
            self.stdout.write(line)
        if dry_run:
            self.stdout.write("dry run: nothing was changed")
