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
        from .signing import reset_signers

        checks.register(taskmq_checks.check_settings)
        checks.register(taskmq_checks.check_database, checks.Tags.database)
        setting_changed.connect(reset_settings, dispatch_uid="taskmq_reset_settings")
        setting_changed.connect(reset_signers, dispatch_uid="taskmq_reset_signers")
