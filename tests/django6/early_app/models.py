"""Django imports this module while it loads the models, before django_taskmq's own (this app comes
first in ``tests.settings_early_tasks``)."""

from . import task


@task(priority=50)
def triple(x):
    return 3 * x
