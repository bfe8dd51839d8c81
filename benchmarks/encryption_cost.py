"""What encryption at rest costs per job: the enqueue (pickle, encrypt, sign, INSERT) and the
claim to start (reserve, verify, decrypt, unpickle as the pusher does, then the worker's load),
with ``encrypt`` off and on, in one run per engine.

    .venv/bin/python benchmarks/encryption_cost.py --engine sqlite
    .venv/bin/python benchmarks/encryption_cost.py --engine postgresql \
        --json benchmarks/results/encryption-cost-postgresql.json

Each job carries about 300 bytes of arguments (an e-mail, a token, a small dict) and returns a
result of the same size (sealed with ``execution.seal``, encrypted when on). Rounds interleave off
and on; the median of each is printed in microseconds per job, of wall time and of this process's
CPU time (``time.process_time``: steadier on a machine that other work loads, and on PostgreSQL it
leaves out the server's share). PostgreSQL is the server of
``tests/settings_postgresql.py`` (a database of its own, created and dropped here). Needs the
repository's ``.venv``. A development tool, not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engine", choices=["sqlite", "postgresql"], default="sqlite")
    parser.add_argument("--jobs", type=int, default=1000, help="jobs per round and per mode")
    parser.add_argument("--batch", type=int, default=50, help="jobs reserved per claim, as the pusher does")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--json", help="write the rows to this file")
    args = parser.parse_args()

    sys.path.insert(0, str(ROOT))
    if args.engine == "sqlite":
        os.environ["TASKMQ_DB_NAME"] = os.path.join(tempfile.mkdtemp(prefix="encryption-cost-"), "db.sqlite3")
    else:
        os.environ["TASKMQ_DB_NAME"] = f"taskmq_encryption_cost_{os.getpid()}"
    os.environ["DJANGO_SETTINGS_MODULE"] = f"tests.settings_{args.engine}"
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connection

    created = None
    if args.engine == "postgresql":
        created = connection.creation.create_test_db(verbosity=0, keepdb=False, serialize=False)
    else:
        call_command("migrate", verbosity=0)
    from django_taskmq import async_task
    from django_taskmq.runtime import execution
    from django_taskmq.brokers import get_broker
    from django_taskmq.cluster.messages import Ticket, load_task
    from django_taskmq.conf import get_settings, reset_settings
    from django_taskmq.encryption import generate_key
    from django_taskmq.models import Job

    settings.TASKMQ = {**settings.TASKMQ, "sync": False, "encryption_keys": [generate_key()]}
    reset_settings()
    payload = {"email": "ada@example.com", "token": "t" * 64, "items": list(range(40)), "note": "n" * 60}

    def per_job(start: tuple[float, float]) -> tuple[float, float]:
        return ((time.perf_counter() - start[0]) / args.jobs * 1e6, (time.process_time() - start[1]) / args.jobs * 1e6)

    def enqueue_us(encrypt: bool) -> tuple[float, float]:
        start = time.perf_counter(), time.process_time()
        for i in range(args.jobs):
            async_task("tests.tasks.echo", i, payload=payload, encrypt=encrypt or None)
        return per_job(start)

    def claim_to_start_us() -> tuple[float, float]:
        broker, conf = get_broker(), get_settings()
        start = time.perf_counter(), time.process_time()
        done = 0
        while done < args.jobs:
            reserved = broker.reserve(["default"], args.batch, 60.0, "bench")
            if not reserved:
                break
            for r in reserved:
                message = load_task(Ticket.verified(r, conf.name).blob)  # the pusher, then the worker
                execution.seal(execution.Outcome(message.reservation, message.envelope, execution.SUCCESS,
                                                 result=payload), conf)
            done += len(reserved)
        assert done == args.jobs, done
        return per_job(start)

    rows = []
    keys = ("enqueue_us", "enqueue_cpu_us", "claim_to_start_us", "claim_to_start_cpu_us")
    for round_ in range(args.rounds):
        for encrypt in (False, True):
            Job.objects.all().delete()
            enqueue, claim = enqueue_us(encrypt), claim_to_start_us()
            rows.append({"round": round_, "encrypt": encrypt, **dict(zip(keys, (*enqueue, *claim)))})
    medians = {}
    for encrypt in (False, True):
        mine = [r for r in rows if r["encrypt"] is encrypt]
        medians[encrypt] = m = {k: statistics.median(r[k] for r in mine) for k in keys}
        print(f"{args.engine} encrypt {'on ' if encrypt else 'off'}: enqueue {m['enqueue_us']:7.1f} us "
              f"(cpu {m['enqueue_cpu_us']:6.1f}), claim to start {m['claim_to_start_us']:6.1f} us "
              f"(cpu {m['claim_to_start_cpu_us']:6.1f})  (median of {len(mine)} rounds)")
    for key in keys:
        print(f"  {key}: on / off = {medians[True][key] / medians[False][key]:.3f}")
    if args.json:
        found = {"engine": args.engine, "jobs": args.jobs, "rows": rows}
        Path(args.json).write_text(json.dumps(found, indent=1) + "\n")
    if created is not None:
        connection.creation.destroy_test_db(created, verbosity=0)


if __name__ == "__main__":
    main()
