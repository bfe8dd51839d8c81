"""policy.attempts: the capped history of failed executions (pure, no database)."""

from __future__ import annotations

import pytest

from django_taskmq.policy import attempts
from django_taskmq.policy.storable import MARK


def grow(n, keep=attempts.KEEP, log=None):
    for i in range(1, n + 1):
        log = attempts.record(log, i, f"2026-01-01T00:00:{i:02d}+00:00", f"ValueError: {i}", f"tb {i}", keep=keep)
    return log


def test_entries_are_appended_oldest_first_with_their_number_start_and_text():
    log = grow(2)
    assert log == {"dropped": 0, "attempts": [
        {"attempt": 1, "started_at": "2026-01-01T00:00:01+00:00", "error": "ValueError: 1", "traceback": "tb 1"},
        {"attempt": 2, "started_at": "2026-01-01T00:00:02+00:00", "error": "ValueError: 2", "traceback": "tb 2"},
    ]}


@pytest.mark.parametrize("n", [1, 19, 20, 21, 45])
def test_the_newest_keep_entries_stay_and_the_others_are_counted(n):
    log = grow(n)
    kept = attempts.entries(log)
    assert len(kept) == min(n, attempts.KEEP)
    assert attempts.dropped(log) == max(n - attempts.KEEP, 0)
    assert [e["attempt"] for e in kept] == list(range(max(n - attempts.KEEP, 0) + 1, n + 1))
    assert attempts.dropped(log) + len(kept) == n


def test_a_smaller_cap_and_the_smallest():
    assert [e["attempt"] for e in attempts.entries(grow(5, keep=2))] == [4, 5]
    assert attempts.dropped(grow(5, keep=1)) == 4
    with pytest.raises(ValueError):
        attempts.record(None, 1, "", "", "", keep=0)


def test_each_entry_is_clipped_and_storable():
    error = "E" * (attempts.ERROR_LIMIT * 3) + "\x00"
    traceback = "\udcff" + "t" * (attempts.TRACEBACK_LIMIT * 3) + "raise here"
    (entry,) = attempts.entries(attempts.record(None, 1, "now", error, traceback))
    assert len(entry["error"]) == attempts.ERROR_LIMIT and entry["error"].startswith("EEE")
    assert entry["error"].endswith(MARK) and "\x00" not in entry["error"]
    assert len(entry["traceback"]) == attempts.TRACEBACK_LIMIT
    assert entry["traceback"].startswith(MARK) and entry["traceback"].endswith("raise here")
    short = attempts.entries(attempts.record(None, 1, "now", "bad\x00 \udcff", ""))[0]
    assert short["error"] == "bad \\udcff"
    assert short["traceback"] == ""


@pytest.mark.parametrize("value", [None, [], "not json", {"attempts": "x"}, {"attempts": [1, "a", None]},
                                   {"dropped": "3"}, {"dropped": True}, {"dropped": -2}])
def test_a_missing_or_malformed_column_reads_as_empty_and_is_rebuilt(value):
    """A NULL column (no failure yet, or a row from before migration 0008) or one written by hand."""
    assert attempts.entries(value) == [] and attempts.dropped(value) == 0
    log = attempts.record(value, 4, "now", "KeyError: k", "tb")
    assert log == {"dropped": 0, "attempts": [{"attempt": 4, "started_at": "now", "error": "KeyError: k",
                                               "traceback": "tb"}]}


def test_recording_does_not_change_the_log_it_was_given():
    log = grow(attempts.KEEP)
    before = [dict(e) for e in log["attempts"]]
    attempts.record(log, attempts.KEEP + 1, "now", "e", "t")
    assert log["attempts"] == before and log["dropped"] == 0
