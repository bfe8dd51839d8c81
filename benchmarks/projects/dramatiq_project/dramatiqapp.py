"""The Dramatiq broker of the benchmark: Redis broker, Redis result backend, ``benchtasks.noop``.

Dramatiq keeps its defaults (its default middleware, prefetch, ``--threads`` per process set on
the command line); the one addition is the Results middleware with its Redis backend and
``store_results=True`` on the actor: every finished job leaves a result key, as Celery's and
the database queues' do, which is how the driver counts finished jobs and sees one finish. The
broker and the results use their own Redis databases (BENCH_REDIS_BROKER_DB, BENCH_REDIS_RESULT_DB;
12 and 13 for this system, see systems.py), flushed before every workload.
"""

import os

import dramatiq
from dramatiq.brokers.redis import RedisBroker
from dramatiq.results import Results
from dramatiq.results.backends.redis import RedisBackend

import benchtasks

HOST = os.environ.get("BENCH_REDIS_HOST", "127.0.0.1")
PORT = int(os.environ.get("BENCH_REDIS_PORT", "6379"))
BROKER_DB = int(os.environ.get("BENCH_REDIS_BROKER_DB", "12"))
RESULT_DB = int(os.environ.get("BENCH_REDIS_RESULT_DB", "13"))

broker = RedisBroker(host=HOST, port=PORT, db=BROKER_DB)
result_backend = RedisBackend(host=HOST, port=PORT, db=RESULT_DB)
broker.add_middleware(Results(backend=result_backend))
dramatiq.set_broker(broker)


@dramatiq.actor(actor_name="benchtasks.noop", store_results=True)
def noop(tag=None):
    benchtasks.noop(tag)
