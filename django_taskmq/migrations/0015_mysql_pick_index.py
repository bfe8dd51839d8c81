"""MySQL and MariaDB: the indexes that stand in for PostgreSQL's and SQLite's partial ones.

MySQL has no partial index: Django creates the conditional indexes of ``Job.Meta`` there as
indexes over every row, so the claim's ``taskmq_job_ready`` would walk the finished rows of a queue
too. On MySQL only, this migration adds two virtual columns (computed when read, stored in no row:
adding them is instant on a table of any size) and rebuilds three indexes under their names:

* ``taskmq_job_ready``: ``(pick_queue, pick_rank, id)``. ``pick_queue`` is the queue of a ready
  job and NULL otherwise, ``pick_rank`` is ``-priority``: the index holds the ready set in the
  exact order of the pick (priority first, then FIFO), which MariaDB before 10.8 could not give
  with a descending key.
* ``taskmq_job_key_running``: ``(concurrency_key, state)``: counting a key's running jobs.
* ``taskmq_job_succeeded``: ``(state, finished_at)``: retention and the dashboard, per state.

It also adds ``inserted``, numbered by the server (``AUTO_INCREMENT``) at each insert, with its
unique index: its largest value is one index lookup, and it grows at every insert whatever the
clocks of the hosts that made the job ids. An idle pusher watches it (MySQL has no ``NOTIFY``).
Unlike the virtual columns, adding it rewrites the table: a MySQL database had no job table of
django_taskmq's before this release.

Other engines: nothing.
"""

from django.db import migrations

READY = "('QUEUED', 'RETRYING')"  # JobState.READY when this migration was written
TABLE = "django_taskmq_job"

FORWARDS = [
    f"ALTER TABLE {TABLE} ADD COLUMN pick_queue varchar(100) AS (CASE WHEN state IN {READY} THEN queue END) VIRTUAL, "
    f"ADD COLUMN pick_rank integer AS (-priority) VIRTUAL",
    f"ALTER TABLE {TABLE} ADD COLUMN inserted bigint NOT NULL AUTO_INCREMENT, ADD UNIQUE KEY taskmq_job_inserted (inserted)",
    f"DROP INDEX taskmq_job_ready ON {TABLE}",
    f"CREATE INDEX taskmq_job_ready ON {TABLE} (pick_queue, pick_rank, id)",
    f"DROP INDEX taskmq_job_key_running ON {TABLE}",
    f"CREATE INDEX taskmq_job_key_running ON {TABLE} (concurrency_key, state)",
    f"DROP INDEX taskmq_job_succeeded ON {TABLE}",
    f"CREATE INDEX taskmq_job_succeeded ON {TABLE} (state, finished_at)",
]
BACKWARDS = [
    f"DROP INDEX taskmq_job_succeeded ON {TABLE}",
    f"CREATE INDEX taskmq_job_succeeded ON {TABLE} (finished_at)",
    f"DROP INDEX taskmq_job_key_running ON {TABLE}",
    f"CREATE INDEX taskmq_job_key_running ON {TABLE} (concurrency_key)",
    f"DROP INDEX taskmq_job_ready ON {TABLE}",
    f"CREATE INDEX taskmq_job_ready ON {TABLE} (queue, priority DESC, id)",
    f"ALTER TABLE {TABLE} DROP COLUMN pick_rank, DROP COLUMN pick_queue, DROP COLUMN inserted",
]


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor == "mysql":
        for statement in FORWARDS:
            schema_editor.execute(statement)


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor == "mysql":
        for statement in BACKWARDS:
            schema_editor.execute(statement)


class Migration(migrations.Migration):
    atomic = False  # DDL on MySQL commits by itself


    dependencies = [
        ('django_taskmq', '0014_job_progress'),
    ]

    operations = [
        migrations.RunPython(forwards, backwards, elidable=False),
    ]
