"""The clock seam of the brokers (``brokers/clock.py``) and the skew warning (``cluster/skew.py``)."""

from __future__ import annotations

import logging
import pickle
import time
from types import SimpleNamespace

import pytest

from django_taskmq.brokers.clock import CLOCKS, HOST, POSTGRESQL, FromNow, Skew, clock_for
from django_taskmq.cluster.skew import SkewWatch
from django_taskmq.conf import get_settings
from django_taskmq.exceptions import ConfigError
from tests.memory_broker import MemoryBroker


def test_a_duration_from_now_is_this_host_s_time_plus_it_and_remembers_the_duration():
    before = time.time()
    value = FromNow(30)
    assert before + 30 <= value <= time.time() + 30
    assert value.seconds == 30.0


def test_a_duration_from_now_sent_to_another_process_is_an_absolute_time():
    value = pickle.loads(pickle.dumps(FromNow(5)))
    assert type(value) is float


@pytest.mark.parametrize("clock", list(CLOCKS.values()), ids=list(CLOCKS))
def test_every_clock_fragment_has_exactly_one_placeholder(clock):
    """Inserts put a fragment in a value's place and its one parameter in the value's (orm._insert)."""
    connection = SimpleNamespace(ops=SimpleNamespace(adapt_datetimefield_value=str))
    for sql, params in (clock.at(), clock.at(12.5), clock.stamp(connection), clock.stamp(connection, 3),
                        clock.value(connection, FromNow(7)), clock.value(connection, 1e9)):
        assert sql.count("%s") == 1 and len(params) == 1, (sql, params)


def test_a_database_clock_counts_durations_in_the_statement_and_takes_absolute_times_as_they_are():
    assert POSTGRESQL.at(12.5) == (POSTGRESQL.epoch, [12.5])
    assert POSTGRESQL.value(None, FromNow(7)) == (POSTGRESQL.epoch, [7.0])
    assert POSTGRESQL.value(None, 1e9) == ("%s", [1e9])
    assert not POSTGRESQL.local and POSTGRESQL.local_now() is None


def test_the_host_clock_passes_this_host_s_time():
    before = time.time()
    sql, (value,) = HOST.at(10)
    assert sql == "%s" and before + 10 <= value <= time.time() + 10
    assert HOST.local and HOST.skew(None) is None


def test_an_engine_without_a_clock_is_a_config_error_naming_it():
    with pytest.raises(ConfigError, match="'oracle'.*'reports'"):
        clock_for(SimpleNamespace(vendor="oracle", alias="reports"))


class Skewed(MemoryBroker):
    """A broker whose clock readings are given (the measurement itself is tested on PostgreSQL)."""

    readings: list[Skew | None] = []

    def clock_skew(self):
        return self.readings.pop(0)


def test_a_skew_past_the_threshold_warns_once_and_again_only_after_it_came_back(caplog):
    broker = Skewed(get_settings())
    broker.readings = [Skew(0.2, 0.001), Skew(120.0, 0.002), Skew(119.0, 0.001), Skew(0.1, 0.001),
                       Skew(-8.0, 0.001), Skew(5.5, 0.8)]
    watch = SkewWatch(broker, "c1", threshold=5.0)
    with caplog.at_level(logging.INFO, logger="django_taskmq.cluster.skew"):
        for _ in range(6):
            watch.measure()
    messages = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert [level for level, _ in messages] == ["WARNING", "INFO", "WARNING"], messages
    assert "+120.0 s" in messages[0][1] and "ahead" in messages[0][1]
    assert "-8.0 s" in messages[2][1] and "behind" in messages[2][1]
    # The last reading (5.5 +- 0.8 s) is not surely past 5 s: no warning; it is what the heartbeat shows.
    assert watch.counts() == {"clock_skew": 5.5, "clock_skew_uncertainty": 0.8}


def test_a_host_clock_measures_nothing():
    broker = Skewed(get_settings())
    broker.readings = [None]
    watch = SkewWatch(broker, "c1", threshold=5.0)
    assert watch.measure() is None and watch.counts() == {}
