"""Redaction's pure rules: names masked by substring in any case, nested dicts looked into, the
arguments of encrypted jobs never shown."""

from __future__ import annotations

from hypothesis import given, strategies as st

from django_taskmq.conf import DEFAULT_REDACT
from django_taskmq.policy.redaction import ENCRYPTED, REDACTED, is_secret, redact, shown_call

NAMES = DEFAULT_REDACT


def test_a_name_containing_a_listed_one_in_any_case_is_secret():
    assert is_secret("password", NAMES) and is_secret("DB_Password", NAMES) and is_secret("X-Api_Key", NAMES)
    assert not is_secret("user", NAMES) and not is_secret(3, NAMES)


def test_nested_dicts_lists_and_tuples_are_looked_into():
    value = {"user": "ada", "auth": [{"token": "t"}, ("x", {"secret": "s"})], "n": 1}
    assert redact(value, NAMES) == {"user": "ada", "auth": [{"token": REDACTED}, ("x", {"secret": REDACTED})], "n": 1}


def test_too_deep_a_container_is_masked_whole():
    deep: dict = {"a": "hunter2"}
    for _ in range(10):
        deep = {"next": deep}
    assert "hunter2" not in repr(redact(deep, NAMES))


def test_an_encrypted_call_shows_none_of_its_arguments():
    assert shown_call(("a",), {"b": 1}, {"encrypt": True}, NAMES) == ((ENCRYPTED,), {})
    assert shown_call((), {}, {"encrypt": True}, NAMES, sealed=True) == ((ENCRYPTED,), {})
    assert shown_call((), {}, {"encrypt": True}, NAMES) == ((), {})
    assert shown_call(("a",), {"email": "e", "password": "p", "n": 1}, {"encrypt": ("email",)}, NAMES) == \
        (("a",), {"email": ENCRYPTED, "password": REDACTED, "n": 1})
    # Not decrypted: the listed names stand for what the secret holds.
    assert shown_call(("a",), {"n": 1}, {"encrypt": ("email",)}, NAMES, sealed=True) == \
        (("a",), {"n": 1, "email": ENCRYPTED})


secrets = st.text(min_size=8, max_size=12, alphabet="0123456789abcdef").map(lambda s: f"S{s}")
values = st.recursive(st.integers() | st.text(max_size=5),
                      lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["a", "b"]), inner,
                                                                                 max_size=2), max_leaves=10)


@given(values, secrets, st.sampled_from(sorted(NAMES)))
def test_a_value_under_a_secret_name_never_survives(value, secret, name):
    tree = {"outer": [value, {name.upper(): secret, "other": value}]}
    assert secret not in repr(redact(tree, NAMES))
