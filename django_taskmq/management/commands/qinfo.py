"""``manage.py qinfo``: the clusters alive, per queue the ready jobs (by priority), delayed, retrying,
running (executing on a worker) and reserved (held by a cluster, not started) jobs and dead letters
waiting, and the workflows by state; ``--json`` prints the same, the broker's counts per queue and
priority (``stats``, whose ``reserved`` counts every RUNNING job, started or not) and the
dashboard's numbers, as one JSON object for scripts."""

import json


from django_taskmq.observability import statistics
from django_taskmq.brokers import get_broker
from django_taskmq.management.operator_command import OperatorCommand


class Command(OperatorCommand):
    help = ("Show the clusters alive (their heartbeats), per queue the ready, delayed, retrying, running and "
            "reserved jobs and the dead letters waiting, and the workflows by state.")

    def add_arguments(self, parser):
        parser.add_argument("--json", action="store_true",
                            help="print one JSON object: clusters, queues, throughput, the broker's stats and "
                                 "the workflows by state")

    def handle(self, *args, **options):
        if options["json"]:
            data = statistics.as_json(statistics.snapshot(), get_broker().stats())
            data["flow"] = get_broker().flow_status()
            data["pruning"] = statistics.pruning()
            data["workflows"] = statistics.workflow_counts()
            self.stdout.write(json.dumps(data, indent=2, sort_keys=False))
            return
        clusters = statistics.clusters_alive(with_task_names=False)
        queues = statistics.queue_stats(clusters=clusters)
        self.stdout.write(f"clusters alive: {len(clusters)}")
        for c in clusters:
            counts = ", ".join(f"{k} {v}" for k, v in c.counts.items()
                               if isinstance(v, (int, float)) and not k.startswith("clock_skew"))
            skew = "" if c.clock_skew is None else f" clock_skew={c.clock_skew:+.3f}s"
            self.stdout.write(f"  {c.name} {c.host}:{c.pid} {c.state} workers={c.workers} queues={','.join(c.queues)}"
                              f"{skew} {counts}")
        self.stdout.write(f"{'queue':<16}{'ready':>7}{'delayed':>9}{'retrying':>10}{'running':>9}{'reserved':>10}"
                          f"{'dead':>6}  ready by priority")
        for q in queues:
            bands = " ".join(f"{p}:{n}" for p, n in q.ready.items()) or "-"
            self.stdout.write(f"{q.name:<16}{q.ready_total:>7}{q.delayed:>9}{q.retrying:>10}{q.running:>9}"
                              f"{q.reserved:>10}{q.dead_letters:>6}  {bands}")
        self.stdout.write("running: executing on a worker; reserved: held by a cluster (prefetched), not started")
        paused = sorted(get_broker().paused_queues())
        if paused:
            self.stdout.write(f"paused queues (no cluster claims from them): {', '.join(paused)}")
        self._flow(get_broker().flow_status())
        workflows = statistics.workflow_counts()
        self.stdout.write("workflows: " + ", ".join(f"{state.lower()} {n}" for state, n in workflows.items()))
        suspended = get_broker().suspended()
        self.stdout.write(f"durable jobs: sleeping {suspended['sleep']}, waiting for a signal {suspended['wait']}")
        self._pruning(statistics.pruning())

    def _pruning(self, pruning: dict) -> None:
        kept = ", ".join(f"{state} {'for ever' if s is None else f'{s / 86400:g} d'}"
                         for state, s in pruning["retention"].items())
        by = f"by {pruning['holder']}" if pruning["holder"] else "by no cluster now"
        self.stdout.write(f"retention: {kept}; successes beyond the newest {pruning['save_limit']}")
        self.stdout.write(f"pruning {by}: {pruning['deleted']} job(s) deleted in all, last {pruning['last_run'] or 'never'}")

    def _flow(self, flow: dict) -> None:
        """Flow control in use: keys held (and what waits on them), queue caps, rate limits."""
        if not any(flow.values()):
            return
        self.stdout.write("flow control:")
        for key, use in flow["keys"].items():
            self.stdout.write(f"  key {key}: {use['running']}/{use['limit']} running, {use.get('waiting', 0)} waiting")
        for queue, use in flow["queues"].items():
            self.stdout.write(f"  queue {queue}: {use['running']}/{use['cap']} running (cap)")
        for bucket, use in flow["rates"].items():
            self.stdout.write(f"  rate limit {bucket}: next start in {use['next_start_in']} s")
