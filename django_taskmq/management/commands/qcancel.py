from django.core.management.base import CommandError

from django_taskmq.brokers import get_broker
from django_taskmq.conf import get_settings
from django_taskmq.management.operator_command import OperatorCommand


class Command(OperatorCommand):
    help = ("Cancel jobs by id: a waiting job ends CANCELLED at once; a running one, on any host, is asked "
            "to stop and interrupted after TASKMQ['cancel_grace'] seconds (see django_taskmq.cancel).")

    def add_arguments(self, parser):
        parser.add_argument("ids", nargs="+", help="job ids")

    def handle(self, *args, ids, **options):
        broker = get_broker()
        grace = get_settings().cancel_grace
        missing = []
        for job_id in ids:
            with broker.atomic(write=True):
                if broker.cancel([job_id]):
                    self.stdout.write(f"{job_id} cancelled")
                elif broker.request_cancel([job_id]):
                    self.stdout.write(f"{job_id} running: asked to stop (interrupted if still running {grace:g}s "
                                      "after its cluster sees the request)")
                else:
                    job = broker.jobs([job_id]).get(job_id)
                    if job is None:
                        missing.append(job_id)
                    else:
                        self.stdout.write(f"{job_id} not cancelled: it has finished ({job.state})")
        if missing:
            raise CommandError(f"no such job: {', '.join(missing)}")
