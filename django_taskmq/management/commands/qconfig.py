"""``manage.py qconfig``: the settings in force as a ``TASKMQ`` dict; with ``--from-q-cluster``, the
``TASKMQ`` equivalent of django-q2's ``Q_CLUSTER`` and what it leaves out."""

import pprint
from dataclasses import fields

from django.conf import settings as django_settings
from django.core.management.base import BaseCommand, CommandError

from django_taskmq.compat import q_cluster
from django_taskmq.conf import from_mapping, get_settings
from django_taskmq.exceptions import ConfigError


class Command(BaseCommand):
    help = ("Print the settings in force as a TASKMQ dict, (--from-q-cluster) the TASKMQ equivalent of Q_CLUSTER, "
            "or (--check) every problem a cluster would refuse, one line each.")
    requires_system_checks: list[str] = []  # --check runs django_taskmq's own and reports them one a line

    def add_arguments(self, parser):
        parser.add_argument("--from-q-cluster", action="store_true",
                            help="translate django-q2's Q_CLUSTER setting into TASKMQ; list the keys left out")
        parser.add_argument("--check", action="store_true",
                            help="check settings, database, migrations, task modules and schedules as a cluster "
                                 "would; exit 1 with one line per problem")

    def handle(self, *args, from_q_cluster, check=False, **options):
        if from_q_cluster:
            return self.translate()
        if check:
            return self.check_all()
        try:
            settings = get_settings()
        except ConfigError as exc:
            raise CommandError(str(exc)) from exc
        source = "TASKMQ" if getattr(django_settings, "TASKMQ", None) is not None else (
            "Q_CLUSTER" if getattr(django_settings, "Q_CLUSTER", None) is not None else "the defaults")
        self.stdout.write(f"# in force, read from {source}")
        self.stdout.write("TASKMQ = " + pprint.pformat(_plain(settings), sort_dicts=False))

    def check_all(self) -> None:
        from django_taskmq.checks import problems

        found = list(problems())
        for line in found:
            self.stderr.write(line)
        if found:
            raise SystemExit(1)
        self.stdout.write("qconfig --check: no problem found")

    def translate(self) -> None:
        value = getattr(django_settings, q_cluster.SETTING, None)
        if value is None:
            raise CommandError("there is no Q_CLUSTER setting to translate")
        try:
            taskmq, notes = q_cluster.translate(value)
            from_mapping(taskmq)
        except ConfigError as exc:
            raise CommandError(f"Q_CLUSTER cannot be translated: {exc}") from exc
        self.stdout.write("# django_taskmq's equivalent of Q_CLUSTER")
        for where, reason in notes:
            self.stdout.write(f"# {where} left out: {reason}")
        self.stdout.write("TASKMQ = " + pprint.pformat(taskmq, sort_dicts=False))


def _plain(settings) -> dict:
    """The settings as a TASKMQ dict of plain values (queues and retry as dicts)."""
    out = {}
    for name, value in ((f.name, getattr(settings, f.name)) for f in fields(settings)):
        if name == "queues":
            value = {q: {k: (str(v) if k == "rate_limit" and v is not None else v) for k, v in vars(conf).items()
                         if v is not None} for q, conf in value.items()}
        elif name == "retry":
            value = value.to_dict()
        elif name == "task_modules" and value is not None:
            value = list(value)
        elif name == "metrics_token" and value is not None:
            value = "<set, not shown>"
        elif name == "encryption_keys":
            value = [f"<key id {key}, not shown>" for key in settings.keyring.ids]
        elif name == "redact":
            value = sorted(value)
        out[name] = value
    return out
