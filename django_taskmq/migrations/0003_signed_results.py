"""Results become signed packages: 0.1.0 stored them as unsigned base64 pickles.

The old values are re-signed as they are, without being unpickled here: they were written by
0.1.0 clusters before this migration, and signing them is what keeps them readable.
"""

import base64
import binascii
import logging
import zlib

from django.core import signing as django_signing
from django.db import migrations, models

logger = logging.getLogger(__name__)


def _salt() -> str:
    from django_taskmq.conf import get_settings
    from django_taskmq.envelope import result_salt

    return result_salt(get_settings().name)


def _rows(schema_editor, column: str):
    table = "django_taskmq_job"
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(f"SELECT id, {column} FROM {table} WHERE {column} IS NOT NULL")
        return cursor.fetchall()


def _write(schema_editor, column: str, updates: list) -> None:
    with schema_editor.connection.cursor() as cursor:
        cursor.executemany(f"UPDATE django_taskmq_job SET {column} = %s WHERE id = %s", updates)


def sign_old_results(apps, schema_editor):
    from django_taskmq.envelope import sign_bytes

    salt = _salt()
    updates = []
    for job_id, value in _rows(schema_editor, "result"):
        try:
            data = base64.b64decode(value.encode(), validate=True)
        except (binascii.Error, ValueError):  # not picklefield's base64: nothing a reader could load anyway
            logger.warning("job %s: stored result is not a base64 pickle; dropped", job_id)
            continue
        updates.append((sign_bytes(data, salt), job_id))
    _write(schema_editor, "result_package", updates)


def unsign_results(apps, schema_editor):
    from django_taskmq.envelope import _signer

    signer = _signer(_salt())
    updates = []
    for job_id, package in _rows(schema_editor, "result_package"):
        try:
            data = django_signing.b64_decode(signer.unsign(package).encode())
        except django_signing.BadSignature:
            continue  # never hand an unverified pickle back to 0.1.0
        body = zlib.decompress(data[1:]) if data[:1] == b"z" else data[1:]
        updates.append((base64.b64encode(body).decode(), job_id))
    _write(schema_editor, "result", updates)


class Migration(migrations.Migration):

    dependencies = [
        ("django_taskmq", "0002_notify_trigger"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="result_package",
            field=models.TextField(blank=True, editable=False, null=True, verbose_name="signed result"),
        ),
        migrations.RunPython(sign_old_results, unsign_results),
        migrations.RemoveField(model_name="job", name="result"),
    ]
