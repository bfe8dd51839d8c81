"""Django's tasks framework as these tests use it: ``django.tasks`` on Django 6.0+, else the
``django-tasks`` backport (``django_tasks``) on Django 5.2. Skips the module's tests when neither exists."""

import pytest

try:
    from django.tasks import TaskContext, TaskResultStatus, default_task_backend, task, task_backends
    from django.tasks.base import TaskError
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started

    FRAMEWORK = "django.tasks"
except ImportError:
    try:
        from django_tasks import TaskContext, TaskResultStatus, default_task_backend, task, task_backends
        from django_tasks.base import TaskError
        from django_tasks.exceptions import InvalidTaskError as InvalidTask
        from django_tasks.exceptions import TaskResultDoesNotExist
        from django_tasks.signals import task_enqueued, task_finished, task_started

        FRAMEWORK = "django_tasks"
    except ImportError:
        pytest.skip("neither django.tasks (Django 6.0+) nor the django-tasks backport is installed",
                    allow_module_level=True)

__all__ = ["FRAMEWORK", "InvalidTask", "TaskContext", "TaskError", "TaskResultDoesNotExist", "TaskResultStatus",
           "default_task_backend", "task", "task_backends", "task_enqueued", "task_finished", "task_started"]
