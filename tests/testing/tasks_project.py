"""A project's tasks and views, as the testing helpers' tests use them."""

from __future__ import annotations

import datetime

from django.http import JsonResponse

from django_taskmq import ConfigError, Workflow, async_task, durable, send_signal, task
from django_taskmq.signals import post_execute

HOOKED: list[str] = []
SIGNALLED: list[tuple[str, str]] = []


@task(queue="emails", priority=5)
def send_welcome(address: str) -> str:
    return f"welcome sent to {address}"


def charge(order: int) -> int:
    return order * 100


def ship(order: int) -> str:
    return f"order {order} shipped"


def broken(order: int) -> None:
    raise RuntimeError(f"order {order}: the payment service is down")


def remember(job) -> None:
    """A hook: what ran, in order."""
    HOOKED.append(f"{job.func}:{job.state}")


def _signalled(sender, job_id, func, status, **kwargs):
    SIGNALLED.append((func, str(status.value)))


post_execute.connect(_signalled, dispatch_uid="tests_testing_post_execute")


def signup(request):
    """A view that enqueues: the welcome mail, and an order's workflow."""
    address = request.GET["email"]
    send_welcome.delay(address)
    order = int(request.GET.get("order", 0))
    if order:
        flow = Workflow(f"order-{order}")
        flow.add(charge, order, name="charge")
        flow.add(ship, order, name="ship", after=["charge"], hook=remember)
        flow.enqueue()
    if request.GET.get("broken"):
        async_task(broken, order, max_deliveries=3, hook=remember)
    return JsonResponse({"ok": True})


# -- a durable task: charge, sleep a day, wait two days for an approval, ship -----------------------
STEPS: list[str] = []  # every step function that ran, in order


def _step(tag: str) -> str:
    STEPS.append(tag)
    return tag


@durable
def fulfil(ctx, order: int) -> str:
    ctx.step("charge", _step, f"charge {order}")
    ctx.sleep(datetime.timedelta(days=1))
    decision = ctx.wait_for("approved", timeout=datetime.timedelta(days=2))
    if decision is None:
        ctx.step("refund", _step, f"refund {order}")
        return "timed out"
    ctx.step("ship", _step, f"ship {order} by {decision['by']}")
    return "shipped"


def approve(request, job_id):
    """A view that sends the signal a durable task waits for."""
    try:
        woke = send_signal(job_id, "approved", {"by": request.POST["by"]})
    except ConfigError as exc:
        return JsonResponse({"error": str(exc)}, status=409)
    return JsonResponse({"woke": woke})
