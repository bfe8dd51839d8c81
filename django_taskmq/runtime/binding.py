"""Binding a call to its function's signature, at the call and in the worker.

A call its function cannot take (a missing argument, a keyword it does not accept) raises
``TypeError`` where it is made, as calling the function would, instead of failing every delivery
in a cluster. In the worker the same binding runs before the call: a ``TypeError`` it raises is no
failure of the task (no delivery could run it) and the job goes straight to the dead-letter queue.

A leaf module (it imports only :mod:`.loading`): the producer side and execution both use it.
"""

from __future__ import annotations

import difflib
import functools
import inspect
from collections.abc import Iterable, Sequence
from typing import Any

from .loading import is_django_task, is_durable, is_task, is_task_class, resolve

__all__ = ["signature_of", "path_signature", "bind", "nearest"]


def nearest(name: str, known: Iterable[str]) -> str | None:
    """Return the name of ``known`` closest to ``name`` (difflib), or None when none is close."""
    found = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
    return found[0] if found else None


def _without_first(signature: inspect.Signature) -> inspect.Signature:
    return signature.replace(parameters=list(signature.parameters.values())[1:])


def signature_of(target: Any) -> inspect.Signature | None:
    """Return the signature a call of ``target`` (what a task path names) is bound to, or None
    when it has none to inspect (some functions written in C): such a call is not bound.

    A ``@task`` binds its function's (a ``@durable`` one without its first parameter, the context);
    a ``Task`` class its ``run``'s (without ``self``); a Django task its function's, without the
    context argument when it ``takes_context`` or is ``@durable`` (the worker passes it).
    """
    try:
        if is_task_class(target):
            return _without_first(inspect.signature(target.run))
        if is_task(target):
            signature = inspect.signature(target.func if target.func is not None else target.run)
            # A durable task's first parameter is the context the worker passes.
            return _without_first(signature) if getattr(target, "taskmq_durable", False) else signature
        if is_django_task(target):
            signature = inspect.signature(target.func)
            first = getattr(target, "takes_context", False) or is_durable(target)  # a context the worker passes
            return _without_first(signature) if first else signature
        return inspect.signature(target)
    except (TypeError, ValueError):  # no signature: a builtin without one, an odd callable
        return None


def bind(signature: inspect.Signature | None, args: Sequence[Any], kwargs: dict, path: str,
         options: Iterable[str] = ()) -> None:
    """Raise ``TypeError`` when ``path(*args, **kwargs)`` does not fit ``signature``.

    The message is the one calling the function would give, naming ``path``; a keyword the
    function does not take that is close to one of ``options`` (a misspelled option) says so.
    """
    if signature is None:
        return
    try:
        signature.bind(*args, **kwargs)
    except TypeError as exc:
        message = f"{path}() {exc}"
        for name in kwargs:
            if name not in signature.parameters and name not in options:  # an exact one was the function's
                option = nearest(name, options)
                if option is not None:
                    message += f" (did you mean the option {option!r}?)"
                    break
        raise TypeError(message) from None


@functools.lru_cache(maxsize=1024)
def path_signature(path: str) -> inspect.Signature | None:
    """The signature calls of the function ``path`` names are bound to; None when it does not
    import in this process (a module only the workers have, for a callable handed in) or has no
    signature to inspect: such calls are not bound."""
    try:
        target = resolve(path)
    except Exception:
        return None
    return signature_of(target)
