"""``benchtasks.noop`` as a task of Django 6's tasks framework."""

from django.tasks import task

import benchtasks


@task()
def noop(tag=None):
    benchtasks.noop(tag)
