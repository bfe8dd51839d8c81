"""oban's schema (types, tables, indexes, triggers), as oban.schema's docstring shows for Django."""

from django.db import migrations
from oban.schema import install_sql


class Migration(migrations.Migration):
    initial = True
    dependencies: list = []
    operations = [migrations.RunSQL(install_sql())]
