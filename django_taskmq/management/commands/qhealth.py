"""``manage.py qhealth``: exit 0 when a cluster of this host is alive and reaches the database, 1
otherwise, with one line why; for a Kubernetes exec probe or a systemd ``ExecStartPost`` check."""

from django.core.management.base import BaseCommand

from django_taskmq.observability import health


class Command(BaseCommand):
    help = ("Exit 0 when a cluster of this host (or -n NAME) is alive and connected (fresh heartbeat, "
            "database answering), 1 otherwise; print one line why.")
    requires_system_checks: list[str] = []  # a probe runs often: only what it needs

    def add_arguments(self, parser):
        parser.add_argument("-n", "--name", help="the cluster's label (qcluster -n); default any cluster of the host")
        parser.add_argument("--host", help="the host name the cluster runs on; default this machine's")

    def handle(self, *args, name=None, host=None, **options):
        answer = health.check(name=name, host=host)
        if answer.ok:
            self.stdout.write(f"ok: {answer.reason}")
            return
        self.stderr.write(f"unhealthy: {answer.reason}")
        raise SystemExit(1)
