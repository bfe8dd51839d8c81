"""The attempt history of a job: ``first_started_at`` (when its first execution started;
``started_at`` is the latest's) and ``attempt_log`` (one entry per failed execution, the newest
20: see ``policy/attempts.py``).

Both columns are nullable without a default, so adding them never rewrites the table: a plain
``ALTER TABLE ... ADD COLUMN`` on SQLite (no table rebuild) and a catalogue-only change on
PostgreSQL, however many rows the job table holds. Rows from before keep NULL: their results
report the latest error and the latest start as before.
"""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('django_taskmq', '0007_failed_index'),
    ]

    operations = [
        migrations.AddField(
            model_name='job',
            name='attempt_log',
            field=models.JSONField(blank=True, editable=False, null=True, verbose_name='failed executions'),
        ),
        migrations.AddField(
            model_name='job',
            name='first_started_at',
            field=models.DateTimeField(blank=True, null=True, verbose_name='first execution started'),
        ),
    ]
