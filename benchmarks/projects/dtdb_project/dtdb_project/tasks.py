"""``benchtasks.noop`` as a task of Django's tasks framework (the django-tasks backport)."""

from django_tasks import task

import benchtasks


@task()
def noop(tag=None):
    benchtasks.noop(tag)
