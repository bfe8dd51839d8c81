"""policy.durations: the same units in the page style and the terminal style."""

import pytest

from django_taskmq.policy.durations import duration


@pytest.mark.parametrize("seconds, page, terminal", [
    (None, "-", "-"), (-3, "0 ms", "0ms"), (0.85, "850 ms", "850ms"), (12.5, "12.5 s", "12.5s"),
    (250, "4 min 10 s", "4m10s"), (3 * 3600 + 300, "3 h 5 min", "3h05m"), (52 * 3600, "2 d 4 h", "2d04h"),
])
def test_both_styles(seconds, page, terminal):
    assert duration(seconds) == page
    assert duration(seconds, compact=True) == terminal
