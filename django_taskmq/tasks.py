"""``@task`` and the ``Task`` class: a function with default options and ``.delay()``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .api import async_task
from .runtime.loading import DECLARED
from .options import OPTIONS, TASK_OPTIONS, check_names, validate_options

OPTION_NAMES = TASK_OPTIONS  # the options a task fixes as its defaults


class Task:
    """A task: call it to run it here, ``.delay()`` / ``.apply_async()`` to enqueue it.

    Subclass it and define :meth:`run` for the class form; class attributes named like the
    options (``queue``, ``priority``, ``retry``, ...) are its defaults. ``name`` defaults to the
    dotted path of the function or class, which is what the worker imports.
    """

    taskmq_task = True  # how options and loading recognise a Task without importing this module
    name: str | None = None
    queue: str | None = None
    priority: int | None = None
    retry: Any = None
    timeout: float | None = None
    max_deliveries: int | None = None
    ack_failure: bool | None = None
    hook: Any = None
    on_dead: Any = None
    concurrency_key: Any = None  # a string, or a callable computing it from the call's arguments
    concurrency_limit: int | None = None
    rate_limit: str | None = None
    encrypt: Any = None  # True, or the names of the keyword arguments to encrypt

    def __init__(self, func: Callable | None = None, **options: Any) -> None:
        self.func = func
        for key, value in options.items():
            setattr(self, key, value)
        target = func if func is not None else type(self)
        # What a worker imports: the module attribute @task replaced (or the class).
        self.path = f"{target.__module__}.{target.__qualname__}"
        DECLARED.add(self.path)
        if self.name is None:
            self.name = self.path
        if func is not None:
            self.__doc__ = func.__doc__
            self.__wrapped__ = func
        validate_options(self.defaults())

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        DECLARED.add(f"{cls.__module__}.{cls.__qualname__}")

    def defaults(self) -> dict[str, Any]:
        """Return the options this task enqueues with unless a call overrides them."""
        return {k: getattr(self, k) for k in OPTION_NAMES if getattr(self, k) is not None}

    def run(self, *args: Any, **kwargs: Any) -> Any:
        """Do the work; the decorated function, or your override in a subclass."""
        if self.func is None:
            raise NotImplementedError("subclasses of Task must provide a run() method")
        return self.func(*args, **kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.run(*args, **kwargs)

    def delay(self, *args: Any, **kwargs: Any) -> str:
        """Enqueue a call with the task's defaults; return the job id."""
        return self.apply_async(args, kwargs)

    def apply_async(self, args: tuple | list = (), kwargs: dict | None = None, **options: Any) -> str:
        """Enqueue a call with ``options`` over the task's defaults; return the job id."""
        kwargs = kwargs or {}
        # Every kwarg is the function's: naming same-named options in q_options (None = not given)
        # keeps async_task from taking them as options.
        shadowed = {name: None for name in kwargs if name in OPTIONS}
        return async_task(self, *args, q_options={**shadowed, **self.defaults(), **options}, **kwargs)

    def __repr__(self) -> str:
        return f"<Task {self.name}>"


def task(func: Callable | None = None, /, *, name: str | None = None, **options: Any) -> Any:
    """Make a function a :class:`Task`: ``@task`` or ``@task(queue=..., priority=..., retry=...)``.

    Options: ``queue``, ``priority``, ``retry``, ``timeout``, ``max_deliveries``, ``ack_failure``,
    ``hook``, ``on_dead`` and ``name``; a wrong one raises :class:`ConfigError` at decoration.
    """
    check_names(options, OPTION_NAMES, "@task got ")

    def wrap(f: Callable) -> Task:
        return Task(f, name=name, **options)

    return wrap(func) if func is not None else wrap
