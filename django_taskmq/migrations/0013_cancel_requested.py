"""``Job.cancel_requested_at``: when the cancellation of a running job was requested
(:func:`django_taskmq.cancel`). The cluster that runs the job reads it (see docs/operators.rst,
cancelling) and stops the job.

Nullable without a default, so adding it never rewrites the table (as ``0008``).
"""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('django_taskmq', '0012_queue_pause'),
    ]

    operations = [
        migrations.AddField(
            model_name='job',
            name='cancel_requested_at',
            field=models.DateTimeField(blank=True, editable=False, null=True, verbose_name='cancellation requested'),
        ),
    ]
