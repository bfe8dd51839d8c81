"""Chains: run tasks one after another; each link is queued when the previous one succeeded.

A link that fails for good (FAILED or DEAD) ends the chain: the links after it are never queued.
"""

from __future__ import annotations

from typing import Any

from .api import async_task
from .conf import get_settings
from .exceptions import ConfigError
from .options import func_path, validate_options


class Chain:
    """Build a chain with :meth:`append`, start it with :meth:`run`."""

    def __init__(self, chain: list | None = None, group: str | None = None, **options: Any) -> None:
        self.links: list[tuple[str, tuple, dict, dict]] = []
        self.group = group
        self.options = options
        for link in chain or []:
            if not isinstance(link, (tuple, list)):
                link = (link,)
            func, args, kwargs = (*link, (), {})[:3] if len(link) == 1 else (*link, {})[:3]
            self.append(func, *args, **kwargs)

    def append(self, func: Any, *args: Any, q_options: dict | None = None, **kwargs: Any) -> Chain:
        """Add a link: ``func(*args, **kwargs)`` with per-link options in ``q_options``."""
        options = {**self.options, **(q_options or {})}
        if self.group:
            options.setdefault("group", self.group)
        validate_options(options, get_settings())  # a later link's bad queue fails here, at the call
        self.links.append((func_path(func), tuple(args), dict(kwargs), options))
        return self

    def run(self) -> str:
        """Queue the first link; return its job id."""
        if not self.links:
            raise ConfigError("an empty chain cannot run")
        func, args, kwargs, options = self.links[0]
        rest = self.links[1:]
        return async_task(func, *args, q_options={**options, **({"chain": rest} if rest else {})}, **kwargs)


def async_chain(chain: list, group: str | None = None, **options: Any) -> str:
    """Queue a chain given as a list of ``(func, args, kwargs)`` tuples; return the first job id."""
    return Chain(chain, group=group, **options).run()
