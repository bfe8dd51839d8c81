"""Dramatiq actors of benchmarks/threads.py: Redis broker (database 12); each task appends its
finish time to the Redis list ``io-done`` (database 13), read by the harness."""

import os
import time

import dramatiq
import redis
from dramatiq.brokers.redis import RedisBroker

HOST = os.environ.get("BENCH_REDIS_HOST", "127.0.0.1")
dramatiq.set_broker(RedisBroker(host=HOST, port=6379, db=12))
done = redis.Redis(host=HOST, db=13)


@dramatiq.actor(queue_name="io", max_retries=0)
def work(seconds):
    if seconds:
        time.sleep(seconds)
    done.rpush("io-done", time.time())
