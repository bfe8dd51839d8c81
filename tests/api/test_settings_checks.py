"""Settings: one ``TASKMQ`` dict validated by a system check and by ``conf.from_mapping``; a
wrong value is an error whose message names the setting.
"""

from __future__ import annotations

import pytest

from django_taskmq import ConfigError
from django_taskmq.checks import check_settings
from django_taskmq.conf import Settings, from_mapping, get_settings

BASE = {"queues": {"default": {"weight": 1}, "mail": {"weight": 2}}}

BAD = {
    "workers 0": ({"workers": 0}, "workers"),
    "workers float": ({"workers": 2.5}, "workers"),
    "workers bool": ({"workers": True}, "workers"),
    "queue weight 0": ({"queues": {"default": {"weight": 0}}}, "weight"),
    "queue weight float": ({"queues": {"default": {"weight": 1.5}}}, "weight"),
    "queue entry with an unknown key": ({"queues": {"default": {"weight": 1, "speed": 3}}}, "queues"),
    "no queues": ({"queues": {}}, "queues"),
    "unknown key": ({"wokers": 4}, "wokers"),
    "lease 0": ({"lease": 0}, "lease"),
    "negative timeout": ({"timeout": -1}, "timeout"),
    "max_deliveries string": ({"max_deliveries": "5"}, "max_deliveries"),
    "ack_failures not bool": ({"ack_failures": "yes"}, "ack_failures"),
    "durable_outcomes not bool": ({"durable_outcomes": "no"}, "durable_outcomes"),
    "durable_outcomes 0": ({"durable_outcomes": 0}, "durable_outcomes"),
    "retry with an unknown key": ({"retry": {"tries": 3}}, "retry"),
    "retry of a wrong type": ({"retry": 3}, "retry"),
    "idempotency_ttl 0": ({"idempotency_ttl": 0}, "idempotency_ttl"),
    "default_queue not a queue": ({"default_queue": "mail2"}, "default_queue"),
    "empty name": ({"name": ""}, "name"),
    "name of 101 characters": ({"name": "n" * 101}, "at most 100 characters, got 101"),
    "name with a newline": ({"name": "a\nb"}, "must be printable"),
    "compress not bool": ({"compress": 1}, "compress"),
    "poll 0": ({"poll": 0}, "poll"),
    "threads 0": ({"threads": 0}, "threads"),
    "threads above 256": ({"threads": 257}, "threads"),
    "threads float": ({"threads": 4.5}, "threads"),
    "prepared_statements another string": ({"prepared_statements": "yes"}, "prepared_statements"),
    "listen_database empty": ({"listen_database": ""}, "listen_database"),
    "listen_database not a string": ({"listen_database": 5}, "listen_database"),
    "negative stop_timeout": ({"stop_timeout": -1}, "stop_timeout"),
    "stop_timeout string": ({"stop_timeout": "25s"}, "stop_timeout"),
    "negative cancel_grace": ({"cancel_grace": -0.5}, "cancel_grace"),
    "cancel_grace None": ({"cancel_grace": None}, "cancel_grace"),
    "clock_skew_warning 0": ({"clock_skew_warning": 0}, "clock_skew_warning"),
    "clock_skew_warning string": ({"clock_skew_warning": "5s"}, "clock_skew_warning"),
}


@pytest.mark.parametrize("change,named", BAD.values(), ids=BAD.keys())
def test_from_mapping_raises_config_error_naming_the_key(change, named):
    """conf.from_mapping refuses a wrong value with a ConfigError that names the setting."""
    with pytest.raises(ConfigError, match=named):
        from_mapping({**BASE, **change})


@pytest.mark.parametrize("change,named", BAD.values(), ids=BAD.keys())
def test_system_check_reports_the_wrong_setting(settings, change, named):
    """check_settings returns one Error (taskmq.E001) whose message names the setting."""
    settings.TASKMQ = {**BASE, **change}
    errors = check_settings()
    assert len(errors) == 1
    assert errors[0].id == "taskmq.E001"
    assert errors[0].is_serious()
    assert named in errors[0].msg


def test_system_check_passes_valid_settings(settings):
    """A valid TASKMQ gives no check message."""
    settings.TASKMQ = {**BASE, "workers": 3, "lease": 10, "retry": {"max_attempts": 3}}
    assert check_settings() == []


def test_system_check_reports_an_unknown_database_alias(settings):
    """TASKMQ['database'] must name a configured database (taskmq.E002)."""
    settings.TASKMQ = {**BASE, "database": "elsewhere"}
    (error,) = check_settings()
    assert error.id == "taskmq.E002" and "database" in error.msg


def test_system_check_reports_an_unknown_listen_database_alias(settings):
    """TASKMQ['listen_database'] must name a configured database (taskmq.E010), by the setting's name."""
    settings.TASKMQ = {**BASE, "listen_database": "direct"}
    (error,) = check_settings()
    assert error.id == "taskmq.E010" and error.is_serious()
    assert "TASKMQ['listen_database'] 'direct' is not in DATABASES" in error.msg


@pytest.mark.filterwarnings("ignore:Overriding setting DATABASES")
def test_system_check_wants_postgresql_on_both_sides_of_listen_database(settings):
    """A listen_database beside a broker that is not PostgreSQL (or that is not PostgreSQL itself) is an
    error (taskmq.E011); one on PostgreSQL beside a PostgreSQL broker passes."""
    postgresql = {"ENGINE": "django.db.backends.postgresql", "NAME": "taskmq"}
    settings.DATABASES = {**settings.DATABASES, "direct": postgresql}
    settings.TASKMQ = {**BASE, "listen_database": "direct"}
    engine_of_default = settings.DATABASES["default"]["ENGINE"]
    if engine_of_default.endswith("postgresql"):
        assert check_settings() == []
    else:
        (error,) = check_settings()
        assert error.id == "taskmq.E011" and "listen_database" in error.msg
    settings.DATABASES = {**settings.DATABASES, "direct": {"ENGINE": "django.db.backends.sqlite3", "NAME": "x"}}
    (error,) = check_settings()
    assert error.id == "taskmq.E011" and "listen_database" in error.msg


def test_defaults_follow_the_documented_values():
    """Without TASKMQ the documented defaults apply."""
    conf = from_mapping(None)
    assert (conf.name, conf.lease, conf.max_deliveries, conf.ack_failures, conf.max_yields,
            conf.idempotency_ttl, conf.default_queue, conf.compress, conf.database, conf.sync) == (
        "default", 60, 5, False, 100, 86400, "default", False, "default", False)
    assert conf.weights() == {"default": 1}
    assert conf.workers >= 1
    assert (conf.prepared_statements, conf.listen_database) == (True, None)


def test_overriding_taskmq_resets_the_cached_settings(settings):
    """get_settings() reflects a changed TASKMQ at once (setting_changed resets the cache)."""
    settings.TASKMQ = {**BASE, "max_yields": 7}
    first = get_settings()
    settings.TASKMQ = {**BASE, "max_yields": 9}
    assert (first.max_yields, get_settings().max_yields) == (7, 9)
    assert isinstance(get_settings(), Settings)


@pytest.mark.django_db
def test_a_cluster_needing_more_connections_than_the_server_allows_warns(settings):
    """taskmq.W004 (a database check): workers x threads + 3 above PostgreSQL's max_connections
    (less the superuser's reserve) or MySQL's; silent when it fits, and on SQLite, which has no such limit."""
    from django.core import checks
    from django.db import connection

    settings.TASKMQ = {**settings.TASKMQ, "workers": 2, "threads": 4}
    assert "taskmq.W004" not in [m.id for m in checks.run_checks(databases=["default"])]
    settings.TASKMQ = {**settings.TASKMQ, "workers": 100, "threads": 256}
    ids = [m.id for m in checks.run_checks(databases=["default"])]
    assert ("taskmq.W004" in ids) == (connection.vendor in ("postgresql", "mysql")), ids
    assert "taskmq.W004" not in [m.id for m in checks.run_checks()]  # only where databases are checked
