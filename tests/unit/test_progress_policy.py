"""Progress reports (policy/progress.py): what is stored reads back, for its own delivery only."""

from __future__ import annotations

from hypothesis import given, strategies as st

from django_taskmq.policy.progress import fraction, read, report

numbers = st.one_of(st.integers(0, 10**12), st.floats(0, 1e12, allow_nan=False, allow_infinity=False))


@given(numbers, st.one_of(st.none(), numbers), st.text(max_size=300), st.integers(1, 50), st.integers(1, 50))
def test_a_report_reads_back_for_its_own_delivery_only(done, total, message, delivery, deliveries):
    stored = {**report(done, total, message), "at": 1_700_000_000.5, "delivery": delivery}
    back = read(stored, deliveries)
    if delivery != deliveries:
        assert back is None
    else:
        assert (back["done"], back["total"]) == (done, total)
        assert len(back["message"]) <= 200
        assert back["updated_at"].timestamp() == 1_700_000_000.5


@given(numbers, st.one_of(st.none(), numbers))
def test_the_fraction_stays_between_nought_and_one(done, total):
    share = fraction(report(done, total))
    if not total:
        assert share is None
    else:
        assert 0.0 <= share <= 1.0


def test_anything_else_stored_reads_as_no_report():
    assert read(None, 1) is None
    assert read("5/10", 1) is None
    assert read({"done": 1, "delivery": 1}, 1)["updated_at"] is None


def test_qmonitor_shows_a_bar_the_numbers_and_the_message():
    from django_taskmq.observability.terminal import progress_text

    assert progress_text({"done": 5, "total": 10, "message": "rows"}) == "[#####     ] 5/10 rows"
    assert progress_text({"done": 7, "total": None, "message": ""}) == "7"
    assert progress_text(None) == ""
