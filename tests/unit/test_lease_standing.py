"""What a cluster can say of leases it could not renew (``policy.lease.standing``)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from django_taskmq.policy.lease import HELD, IN_DOUBT, MAY_BE_LOST, renew_interval, standing

leases = st.floats(min_value=1, max_value=86400)


def test_the_three_standings():
    assert standing(10, 60, failing=True) == HELD  # one renewal (every 20 s) failed
    assert standing(31, 60, failing=True) == IN_DOUBT
    assert standing(61, 60, failing=True) == MAY_BE_LOST


@given(st.floats(min_value=0, max_value=10**6), leases)
def test_while_the_database_answers_the_leases_are_held(since, lease):
    assert standing(since, lease, failing=False) == HELD


@given(leases)
def test_one_failed_renewal_is_not_doubt(lease):
    assert standing(renew_interval(lease) * 1.4, lease, failing=True) == HELD


@given(st.floats(min_value=0, max_value=10**6), st.floats(min_value=0, max_value=10**6), leases)
def test_doubt_only_grows_with_time(a, b, lease):
    order = [HELD, IN_DOUBT, MAY_BE_LOST]
    early, late = sorted((a, b))
    assert order.index(standing(early, lease, True)) <= order.index(standing(late, lease, True))
