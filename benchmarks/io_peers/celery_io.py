"""Celery app of benchmarks/threads.py: Redis broker (database 12), no result backend; each task
appends its finish time to the Redis list ``io-done`` (database 13), read by the harness."""

import os
import time

import redis
from celery import Celery

HOST = os.environ.get("BENCH_REDIS_HOST", "127.0.0.1")
app = Celery("io", broker=f"redis://{HOST}:6379/12")
app.conf.broker_connection_retry_on_startup = True
done = redis.Redis(host=HOST, db=13)


@app.task(name="io.work", ignore_result=True)
def work(seconds):
    if seconds:
        time.sleep(seconds)
    done.rpush("io-done", time.time())
