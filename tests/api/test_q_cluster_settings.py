"""django-q2's ``Q_CLUSTER`` read as ``TASKMQ`` when ``TASKMQ`` is absent; every key left out warns;
``manage.py qconfig --from-q-cluster`` prints the equivalent."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from django_taskmq.checks import check_q_cluster, check_settings
from django_taskmq.compat.q_cluster import UNLIMITED, translate
from django_taskmq.conf import get_settings

Q_CLUSTER = {
    "name": "myproject", "workers": 8, "timeout": 60, "retry": 120, "max_attempts": 3, "recycle": 400,
    "compress": True, "save_limit": 100, "ack_failures": True, "catch_up": False, "queue_limit": 80, "poll": 0.5,
    "cache": "default", "cached": 30, "label": "Tasks", "max_rss": 200000, "orm": "default", "sync": False,
    "redis": {"host": "127.0.0.1"}, "cpu_affinity": 1, "bulk": 10,
}


def test_every_key_with_an_equivalent_is_carried_over():
    taskmq, notes = translate(Q_CLUSTER)
    assert taskmq == {
        "name": "myproject", "workers": 8, "timeout": 60, "lease": 120, "max_deliveries": 3, "recycle": 400,
        "compress": True, "save_limit": 100, "ack_failures": True, "catch_up": False, "queue_limit": 80,
        "poll": 0.5, "cache": "default", "cached": 30, "label": "Tasks", "max_rss": 200000, "database": "default",
        "sync": False,
    }
    assert [where for where, _ in notes] == ["Q_CLUSTER['redis']", "Q_CLUSTER['cpu_affinity']", "Q_CLUSTER['bulk']"]


def test_values_that_mean_something_else_are_converted_and_said():
    taskmq, notes = translate({"max_attempts": 0, "save_limit": -1, "workers": False, "daemonize_workers": False,
                               "ALT_CLUSTERS": {"long": {"timeout": 3000}, "short": {}}, "wokers": 2})
    assert taskmq == {"max_deliveries": UNLIMITED, "save_limit": 1,
                      "queues": {"default": {"weight": 1}, "long": {"weight": 1}, "short": {"weight": 1}}}
    assert [where for where, _ in notes] == ["Q_CLUSTER['save_limit']", "Q_CLUSTER['ALT_CLUSTERS']['long']['timeout']",
                                             "Q_CLUSTER['wokers']"]


def test_q_cluster_is_read_when_taskmq_is_absent_and_taskmq_wins(settings):
    del settings.TASKMQ
    settings.Q_CLUSTER = Q_CLUSTER
    conf = get_settings()
    assert (conf.name, conf.workers, conf.lease, conf.max_deliveries, conf.cached, conf.label) == (
        "myproject", 8, 120, 3, 30, "Tasks")
    warnings = check_q_cluster()
    assert [w.id for w in warnings] == ["taskmq.W002"] * 3
    assert warnings[0].msg.startswith("Q_CLUSTER['redis'] is not carried over to django_taskmq: ")
    settings.TASKMQ = {"name": "wins"}
    assert get_settings().name == "wins" and check_q_cluster() == []


def test_a_bad_q_cluster_value_is_a_system_check_error_naming_where_it_came_from(settings):
    del settings.TASKMQ
    settings.Q_CLUSTER = {"retry": 0}
    (error,) = [m for m in check_settings() if m.id == "taskmq.E001"]
    assert "TASKMQ['lease'] must be >= 1, got 0" in error.msg and "read from Q_CLUSTER" in error.msg


def test_an_unknown_cache_is_a_system_check_error(taskmq_settings):
    taskmq_settings(cache="nowhere")
    assert [m.id for m in check_settings()] == ["taskmq.E003"]


def qconfig(*args: str) -> str:
    out = io.StringIO()
    call_command("qconfig", *args, stdout=out)
    return out.getvalue()


def test_qconfig_prints_the_equivalent_taskmq(settings):
    settings.Q_CLUSTER = {"name": "myproject", "retry": 90, "redis": {}}
    out = qconfig("--from-q-cluster")
    assert "# Q_CLUSTER['redis'] left out: django_taskmq's broker is the Django database" in out
    namespace: dict = {}
    exec(out, namespace)  # the printed dict is Python that can be pasted into settings.py
    assert namespace["TASKMQ"] == {"name": "myproject", "lease": 90}
    assert "# in force, read from TASKMQ" in qconfig()
    del settings.Q_CLUSTER
    with pytest.raises(CommandError, match="no Q_CLUSTER"):
        qconfig("--from-q-cluster")


def test_qconfig_prints_the_settings_in_force_as_python(taskmq_settings):
    taskmq_settings(metrics_token="a" * 20)
    namespace: dict = {}
    exec(qconfig(), namespace)
    printed = namespace["TASKMQ"]
    assert printed["name"] == "tests" and printed["metrics_token"] == "<set, not shown>"
    printed.pop("metrics_token")
    from django_taskmq.conf import from_mapping

    assert from_mapping(printed).queues == get_settings().queues


def test_the_label_names_the_app_in_the_admin(taskmq_settings):
    from django.apps import apps

    config = apps.get_app_config("django_taskmq")
    before = config.verbose_name
    try:
        taskmq_settings(label="Background work")
        config._label()
        assert config.verbose_name == "Background work"
    finally:
        config.verbose_name = before
