"""The coalescing keys' table (``async_task(unique_key=...)``): its primary key decides between
concurrent enqueuers of one key. A new table: nothing else changes."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('django_taskmq', '0015_mysql_pick_index'),
    ]

    operations = [
        migrations.CreateModel(
            name='UniqueKey',
            fields=[
                ('key', models.CharField(max_length=255, primary_key=True, serialize=False)),
                ('job_id', models.CharField(max_length=32)),
                ('states', models.CharField(max_length=64)),
            ],
            options={
                'verbose_name': 'coalescing key',
            },
        ),
    ]
