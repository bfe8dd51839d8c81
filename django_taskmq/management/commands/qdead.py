"""``manage.py qdead``: list, replay or purge dead letters. ``replay`` takes dead-letter ids (the
first column of ``list``) or job ids (the third): a job id replays its job's pending dead letter."""

import re

from django.core.management.base import CommandError

from django_taskmq.brokers import get_broker
from django_taskmq.exceptions import ConfigError
from django_taskmq.management.operator_command import OperatorCommand

JOB_ID = re.compile(r"[0-9a-f]{24}")


class Command(OperatorCommand):
    help = "The dead-letter queue: list, replay (one or all) or purge, optionally for one queue."

    def add_arguments(self, parser):
        parser.add_argument("action", choices=["list", "replay", "purge"])
        parser.add_argument("ids", nargs="*", help="dead letter ids or job ids to replay")
        parser.add_argument("-Q", "--queue", help="only this queue")
        parser.add_argument("--all", action="store_true", help="replay every pending dead letter")
        parser.add_argument("--to-queue", help="replay into this queue")
        parser.add_argument("--priority", type=int, help="replay with this priority")

    def handle(self, *args, action, ids, queue, all, to_queue, priority, **options):
        broker = get_broker()
        try:
            if action == "list":
                self.stdout.write(f"{'letter':>6} {'queue':<12} {'job':<24} task deliveries failed_at reason")
                for letter in broker.dead_letters(queue):
                    self.stdout.write(f"{letter.pk:>6} {letter.queue:<12} {letter.job_id} {letter.job.task_name} "
                                      f"deliveries={letter.deliveries} {letter.failed_at:%Y-%m-%d %H:%M:%S} {letter.reason}")
            elif action == "replay":
                if all and (to_queue or priority is not None or ids):
                    raise CommandError("replay --all takes only -Q; give ids to replay into --to-queue/--priority")
                if ids and queue:
                    raise CommandError("-Q selects dead letters for --all, list and purge; with ids use --to-queue")
                if all:
                    self.stdout.write(f"replayed {broker.replay_all(queue)}")
                elif ids:
                    for pk in [self._letter(broker, given) for given in ids]:
                        self.stdout.write(f"replayed {broker.replay_dead(pk, queue=to_queue, priority=priority)}")
                else:
                    raise CommandError("give dead letter ids, job ids or --all")
            else:
                self.stdout.write(f"purged {broker.purge_dead(queue)}")
        except ConfigError as exc:
            raise CommandError(str(exc)) from exc

    def _letter(self, broker, given: str) -> int:
        """The dead-letter id ``given`` names: itself, or a job id's pending dead letter."""
        if given.isdigit() and not JOB_ID.fullmatch(given):
            return int(given)
        if not JOB_ID.fullmatch(given):
            raise CommandError(f"{given!r} is neither a dead letter id (a number) nor a job id (24 hex digits)")
        letter = broker.dead_letters().filter(job_id=given).order_by("-failed_at", "-id").first()
        if letter is None:
            raise CommandError(f"job {given} has no dead letter waiting (replayed already, or it is not dead)")
        return letter.pk
