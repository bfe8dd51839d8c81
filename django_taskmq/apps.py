from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class TaskMQConfig(AppConfig):
    name = "django_taskmq"
    verbose_name = _("Task queue")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.core import checks
        from django.core.signals import setting_changed

        from . import checks as taskmq_checks
        from .conf import reset_settings
        from .envelope import reset_signers

        checks.register(taskmq_checks.check_settings, taskmq_checks.TAG)
        checks.register(taskmq_checks.check_database, checks.Tags.database, taskmq_checks.TAG)
        checks.register(taskmq_checks.check_database_server, checks.Tags.database, taskmq_checks.TAG,
                        taskmq_checks.SERVER_TAG)
        setting_changed.connect(reset_settings, dispatch_uid="taskmq_reset_settings")
        setting_changed.connect(reset_signers, dispatch_uid="taskmq_reset_signers")
        self._connect_django_tasks(checks)
        self._label()

    def _label(self) -> None:
        """TASKMQ['label'] (django-q2's Q_CLUSTER['label']) names the app in the admin."""
        from .conf import get_settings
        from .exceptions import ConfigError

        try:
            label = get_settings().label
        except ConfigError:
            return  # the system checks report it (taskmq.E001)
        if label:
            self.verbose_name = label

    @staticmethod
    def _connect_django_tasks(checks) -> None:
        """With a TaskMQBackend in TASKS: Django's task signals and the QUEUES check (taskmq.W050)."""
        from django.conf import settings

        backends = (getattr(settings, "TASKS", None) or {}).values()
        if not any(str(b.get("BACKEND", "")).startswith("django_taskmq.backends.") for b in backends):
            return
        try:  # django.tasks (Django 6.0+) or the django-tasks backport (Django 5.2)
            from .backends import tasks as django_tasks_backend
        except ImportError:
            return  # neither is installed: nothing can enqueue a Django task
        django_tasks_backend.connect()
        from .checks import TAG

        checks.register(django_tasks_backend.check_queues, TAG)
