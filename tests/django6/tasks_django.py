"""Tasks declared with Django's own ``django.tasks`` API (Django 6.0+)."""

from django.tasks import task


@task(priority=5)
def multiply(a, b):
    return a * b


@task
def explode():
    raise ValueError("django task failed")


def with_context(context):
    """Left undecorated: the test decorates it with takes_context=True and expects a refusal."""
    return context.attempt
