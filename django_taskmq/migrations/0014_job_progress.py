"""The progress report of a running job (``current_job().set_progress``, see progress.py).

Nullable without a default, as 0008's columns: adding it never rewrites the job table.
"""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('django_taskmq', '0013_cancel_requested'),
    ]

    operations = [
        migrations.AddField(
            model_name='job',
            name='progress_report',
            field=models.JSONField(blank=True, editable=False, null=True, verbose_name='progress'),
        ),
    ]
