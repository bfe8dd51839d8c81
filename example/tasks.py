"""Example tasks used by the demo."""

import hashlib
import time

from django_taskmq import Priority, RetryLater, task


@task(queue="emails", priority=Priority.HIGH)
def send_welcome(address: str) -> str:
    """Pretend to send an email."""
    time.sleep(0.01)
    return f"welcome sent to {address}"


@task(queue="reports")
def build_report(n: int) -> str:
    """Compute something small."""
    return hashlib.sha256(str(n).encode()).hexdigest()[:12]


def add(a: int, b: int) -> int:
    return a + b


_flaky_calls: dict[str, int] = {}


def flaky(name: str) -> str:
    """Fail the first delivery, succeed on the next (shows a retry)."""
    from django_taskmq import current_job, fetch

    job = fetch(current_job())
    if job is not None and job.deliveries < 2:
        raise RetryLater("first try always fails", delay=0.2)
    return f"{name} worked on delivery {job.deliveries if job else '?'}"
