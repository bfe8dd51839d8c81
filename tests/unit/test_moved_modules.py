"""The import paths that moved keep working for a while: each old module warns, naming the new
path, and hands over the new module itself (the same objects, so pickles and dotted settings that
name the old path still resolve)."""

from __future__ import annotations

import importlib
import pickle
import sys
import warnings

import pytest

import django_taskmq


@pytest.mark.parametrize("old, new", sorted(django_taskmq.MOVED.items()))
def test_an_old_path_warns_and_gives_the_new_modules_objects(old, new):
    sys.modules.pop(f"django_taskmq.{old}", None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(f"django_taskmq.{old}")
    moved = importlib.import_module(f"django_taskmq.{new}")
    assert module is moved
    messages = [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]
    assert messages == [f"django_taskmq.{old} is deprecated: import django_taskmq.{new} instead "
                        "(the old path is removed in the release after next)"]


def test_a_name_imported_from_an_old_path_is_the_new_one():
    sys.modules.pop("django_taskmq.reporting", None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from django_taskmq.reporting import failed
    from django_taskmq.observability.reporting import failed as new_failed

    assert failed is new_failed


def test_signing_is_the_envelope_module_now():
    # signing.py and envelope.py became one module: what code imported from signing still works.
    sys.modules.pop("django_taskmq.signing", None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from django_taskmq.signing import BAD_SIGNATURE, sign, verify
    from django_taskmq import envelope

    assert (sign, verify, BAD_SIGNATURE) == (envelope.sign, envelope.verify, envelope.BAD_SIGNATURE)


def test_a_pickle_naming_an_old_path_loads():
    # What an object pickled before the move names: its class under the old module path.
    from django_taskmq.runtime.execution import Status

    old = pickle.dumps(Status.SUCCESS, protocol=0).replace(b"django_taskmq.runtime.execution", b"django_taskmq.execution")
    assert b"django_taskmq.execution" in old
    sys.modules.pop("django_taskmq.execution", None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        assert pickle.loads(old) is Status.SUCCESS
