"""Dead letters carry their job's task name (the admin searches them without a join to the job
table) and have an index for the admin's list order, newest first."""

from django.db import migrations, models
from django.db.models import OuterRef, Subquery


def copy_task_names(apps, schema_editor):
    DeadLetter = apps.get_model("django_taskmq", "DeadLetter")
    Job = apps.get_model("django_taskmq", "Job")
    db = schema_editor.connection.alias
    DeadLetter.objects.using(db).update(
        task_name=Subquery(Job.objects.using(db).filter(pk=OuterRef("job_id")).values("task_name")[:1]))


class Migration(migrations.Migration):

    dependencies = [
        ("django_taskmq", "0009_schedule_tz"),
    ]

    operations = [
        migrations.AddField(
            model_name="deadletter",
            name="task_name",
            field=models.CharField(blank=True, default="", max_length=255),
        ),
        migrations.RunPython(copy_task_names, migrations.RunPython.noop, elidable=True),
        migrations.AddIndex(
            model_name="deadletter",
            index=models.Index(fields=["-failed_at", "-id"], name="taskmq_dead_failed_at"),
        ),
    ]
