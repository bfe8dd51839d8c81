"""An app whose package defines Django tasks: Django imports it while it loads the apps, before any
model can be imported, so the backend the ``@task`` decorator builds must not import models
(``test_early_tasks.py``). Its ``models.py`` defines one more, imported while models load."""

try:  # Django 6.0+
    from django.tasks import task
except ImportError:  # Django 5.2 with the django-tasks backport
    from django_tasks import task


@task()
def double(x):
    return 2 * x
