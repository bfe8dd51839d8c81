"""On PostgreSQL, notify idle clusters when jobs are inserted (LISTEN/NOTIFY instead of polling).

A statement-level trigger costs the enqueuer nothing extra per call: no second round trip.
"""

from django.db import migrations

CREATE = """
CREATE OR REPLACE FUNCTION django_taskmq_notify() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('taskmq_job', '');
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;
DROP TRIGGER IF EXISTS django_taskmq_job_notify ON django_taskmq_job;
CREATE TRIGGER django_taskmq_job_notify AFTER INSERT ON django_taskmq_job
    FOR EACH STATEMENT EXECUTE FUNCTION django_taskmq_notify();
"""

DROP = """
DROP TRIGGER IF EXISTS django_taskmq_job_notify ON django_taskmq_job;
DROP FUNCTION IF EXISTS django_taskmq_notify();
"""


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CREATE)


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP)


class Migration(migrations.Migration):
    dependencies = [("django_taskmq", "0001_initial")]
    operations = [migrations.RunPython(forwards, backwards)]
