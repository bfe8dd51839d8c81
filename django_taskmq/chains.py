"""Chains: run tasks one after another; each link runs once the previous one succeeded.

A chain is a workflow underneath (:mod:`.workflows`): every link is a step waiting for the one
before it. A link that fails for good (FAILED or DEAD) ends the chain: the links after it end
CANCELLED, never run, and replaying the failed link resumes the chain.
"""

from __future__ import annotations

from typing import Any

from .conf import get_settings
from .exceptions import ConfigError
from .options import func_path, validate_options
from .workflows import Workflow


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
        """Queue the chain (every link at once, each waiting for the one before); return the
        first link's job id."""
        if not self.links:
            raise ConfigError("an empty chain cannot run")
        return run_links(self.links, self.group)


def run_links(links: list[tuple[str, tuple, dict, dict]], group: str | None = None, sync: bool | None = None) -> str:
    """Queue ``links`` (``(func path, args, kwargs, options)``) as a workflow, each waiting for
    the one before; return the first link's job id. Links run inline when ``sync`` is True, or,
    when it is None, when the first link's options say ``sync`` (django-q2's ``async_chain(sync=True)``)."""
    flow = Workflow(name=f"chain {group}" if group else "chain")
    previous: list[str] = []
    for number, (func, args, kwargs, options) in enumerate(links, 1):
        options = dict(options)
        link_sync = options.pop("sync", None)
        sync = link_sync if sync is None else sync
        previous = [flow.add_call(func, args, kwargs, options, name=f"link-{number}", after=previous)]
    flow.enqueue(sync=sync)
    return flow.job_ids["link-1"]


def async_chain(chain: list, group: str | None = None, **options: Any) -> str:
    """Queue a chain given as a list of ``(func, args, kwargs)`` tuples; return the first job id."""
    return Chain(chain, group=group, **options).run()
