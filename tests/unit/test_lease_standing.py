"""What a cluster can say of leases it could not renew (``policy.lease.standing``)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from django_taskmq.policy.lease import (HELD, IN_DOUBT, MAY_BE_LOST, renew_interval, standing, statement_bound,
                                        wedged_after)

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



def test_the_statement_bound_of_the_default_lease():
    assert (statement_bound(60), wedged_after(60)) == (10, 20)
    assert (statement_bound(3), wedged_after(3)) == (1, 2)  # the floor


@given(st.floats(min_value=0.1, max_value=1e6))
def test_a_hung_statement_ends_before_the_monitor_is_held_back(lease):
    # The sentinel starts no waiting task after half the wedged bound without a monitor turn.
    assert 1.0 <= statement_bound(lease) <= wedged_after(lease) / 2 <= lease / 2 + 1
