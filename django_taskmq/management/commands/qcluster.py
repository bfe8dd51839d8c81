import dataclasses

from django.core.management.base import BaseCommand, CommandError

from django_taskmq.conf import MAX_THREADS, cluster_name_problem, get_settings
from django_taskmq.exceptions import ConfigError


class Command(BaseCommand):
    help = "Run a django_taskmq cluster: a sentinel with a pusher, workers and a monitor."
    # Only django_taskmq's own checks (in handle): the project-wide ones import every URLconf and
    # view, which a cluster never uses, and would delay its first job by that much.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser):
        parser.add_argument("-n", "--name", help="label of this cluster (heartbeat, Job.cluster): at most 100 "
                            "printable characters, as TASKMQ['name'], its default; packages are always verified "
                            "with TASKMQ['name']")
        parser.add_argument("-Q", "--queues", help="comma-separated queues to serve; default all")
        parser.add_argument("-w", "--workers", type=int, help="number of workers; default TASKMQ['workers']")
        parser.add_argument("-t", "--threads", type=int,
                            help="tasks each worker runs at once, in threads; default TASKMQ['threads']")
        parser.add_argument("--burst", "--run-once", action="store_true", dest="burst",
                            help="drain what is ready, then stop (--run-once: the same, as django-q2 scripts name it)")
        parser.add_argument("--health-port", type=int, metavar="PORT",
                            help="serve /health/live and /health/ready over HTTP on PORT; default "
                                 "TASKMQ['health_port'] (none)")

    def handle(self, *args, **options):
        from django_taskmq.brokers import get_broker
        from django_taskmq.checks import TAG
        from django_taskmq.cluster import console, outage
        from django_taskmq.cluster.sentinel import Sentinel

        # First: a name the heartbeat cannot hold must not wait for the checks, nor start a cluster.
        if options["name"] is not None:
            problem = cluster_name_problem(options["name"])
            if problem:
                raise CommandError(f"--name {problem} (as TASKMQ['name'])")
        # A site without LOGGING still hears what the cluster does (-v 0: only warnings and errors).
        console.route(options["verbosity"])
        if not options.get("skip_checks"):  # call_command skips them, as for any command
            self.check(tags=[TAG])

        try:
            settings = get_settings()
        except ConfigError as exc:
            raise CommandError(str(exc)) from exc
        queues = None
        if options["queues"]:
            queues = [q.strip() for q in options["queues"].split(",") if q.strip()]
            try:
                for queue in queues:
                    settings.check_queue(queue)
            except ConfigError as exc:
                raise CommandError(str(exc)) from exc
        if options.get("health_port") is not None:
            if not 1 <= options["health_port"] <= 65535:
                raise CommandError("--health-port must be from 1 to 65535")
            settings = dataclasses.replace(settings, health_port=options["health_port"])
        if options["workers"] is not None and options["workers"] < 1:
            raise CommandError("--workers must be at least 1")
        if options["threads"] is not None and not 1 <= options["threads"] <= MAX_THREADS:
            raise CommandError(f"--threads must be from 1 to {MAX_THREADS}")
        # Before anything is spawned: a database that is away or not migrated is one line and
        # exit status 1, not a cluster retrying for ever (a running cluster does retry, see outage).
        outage.prepare(settings.database, settings.dead_connection_timeout)
        if settings.listen_database is not None:
            outage.prepare(settings.listen_database, settings.dead_connection_timeout)
        broker = get_broker()
        problem = outage.check(settings.database, broker.describe())
        if problem:
            self.stderr.write(f"qcluster: {problem}")
            raise SystemExit(1)
        if not options.get("skip_checks"):  # the server's version and settings, now that it answers
            from django_taskmq.checks import SERVER_TAG

            self.check(tags=[SERVER_TAG], databases=[settings.database])
            outage.close_quietly(settings.database)  # the sentinel connects afresh, after forking
        from django_taskmq.checks import connection_budget_problem

        budget = connection_budget_problem(settings.database, options["workers"] or settings.workers,
                                           options["threads"] or settings.threads)
        if budget:
            self.stderr.write(f"qcluster: warning: {budget}")
        # Imported before the fork, once, so that every process shares them: otherwise the sentinel
        # (its scheduler), the monitor and each worker that records a success import them for
        # themselves after it, and importing writes to, so copies, much of the heap they inherited
        # (0.7 to 3 MiB a cluster; see "Memory" in docs/performance.rst).
        from django_taskmq import api, scheduler
        from django_taskmq.runtime import recorder  # noqa: F401

        # The one place the cluster's broker is chosen; the pusher and the monitor, forked children,
        # each build their own at their entry point.
        status = Sentinel(settings, broker, queues=queues, burst=options["burst"], workers=options["workers"],
                          name=options["name"], threads=options["threads"]).start()
        if status:
            raise SystemExit(status)
