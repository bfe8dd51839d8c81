"""The Celery app of the benchmark: Redis broker and result backend, ``benchtasks.noop``.

Celery keeps its defaults (prefetch multiplier 4, acks on start, mingle and gossip on, results
kept a day) apart from the pool and concurrency, which the command line sets: ``celery -A
celeryapp worker --pool prefork --concurrency 2``. The broker and the result backend use their
own Redis databases (BENCH_REDIS_BROKER_DB, BENCH_REDIS_RESULT_DB; 10 and 11 by default),
flushed before every workload, so the result database's key count is the number of finished
jobs.
"""

import os

from celery import Celery

import benchtasks

HOST = os.environ.get("BENCH_REDIS_HOST", "127.0.0.1")
PORT = os.environ.get("BENCH_REDIS_PORT", "6379")
BROKER_DB = int(os.environ.get("BENCH_REDIS_BROKER_DB", "10"))
RESULT_DB = int(os.environ.get("BENCH_REDIS_RESULT_DB", "11"))

app = Celery("bench", broker=f"redis://{HOST}:{PORT}/{BROKER_DB}", backend=f"redis://{HOST}:{PORT}/{RESULT_DB}")
app.conf.broker_connection_retry_on_startup = True  # silences a deprecation warning only


@app.task(name="benchtasks.noop")
def noop(tag=None):
    benchtasks.noop(tag)


# fan_in.py: the steps of a chord and its callback, which receives their results.
@app.task(name="benchtasks.item")
def item(i):
    return benchtasks.item(i)


@app.task(name="benchtasks.merge_results")
def merge_results(results):
    return {"count": len(results), "sum": sum(results)}
