"""Cluster ids (``ids.cluster_id``): bounded, and unique to one sentinel process whatever the
lengths of the cluster's name and host."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from django_taskmq.policy.ids import CLUSTER_ID_LENGTH, cluster_id

names = st.text(min_size=1, max_size=300)
pids = st.integers(min_value=1, max_value=2**31 - 1)


@given(names, st.text(min_size=1, max_size=255), pids)
def test_an_id_fits_its_column_and_keeps_the_pid_whole(name, host, pid):
    made = cluster_id(name, host, pid)
    assert len(made) <= CLUSTER_ID_LENGTH
    assert made.rsplit(":", 2)[1] == str(pid)


@given(names, st.text(min_size=1, max_size=255), pids, pids)
def test_two_sentinels_never_share_an_id(name, host, pid, other):
    assert cluster_id(name, host, pid) != cluster_id(name, host, other)  # the random part tells even equal pids apart


def test_a_short_name_and_host_are_kept_as_they_are():
    assert cluster_id("web", "h1", 42).startswith("web:h1:42:")


def test_long_names_sharing_their_head_still_differ():
    head = "billing-reports-priority-eu-west-1-nightly-"
    a, b = cluster_id(head + "reconciliation", "h", 1), cluster_id(head + "settlement", "h", 1)
    assert a.split(":")[0] != b.split(":")[0]
    assert a.split(":")[0].startswith(head[:10])
