"""A workflow drawn as an SVG on the server: no JavaScript, no database.

Steps are laid out in columns by dependency depth (a step's layer is 0 without dependencies,
else 1 + the highest layer of the steps it waits for), left to right; edges are curves from a step
to the steps that wait for it. Each node is a rectangle in its job state's colour with the step's
name and state, a link to its job's page; a ``run_on_failure`` step has a dashed border. At most
``limit`` nodes are drawn (the first layers first), so that a workflow of 10,000 steps stays a page.

:func:`layout` needs only the names and dependencies, so a page can load the jobs of the drawn
steps alone; :func:`draw` renders a layout; :func:`workflow_svg` does both.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from .display import STATE_COLOURS, shorten

MAX_NODES = 500  # nodes drawn; the others are counted, not drawn
NODE_W, NODE_H = 170, 40
COLUMN_GAP, ROW_GAP, MARGIN = 60, 12, 10
NAME_SHOWN = 24  # characters of a step's name inside its node (the whole name is in its tooltip)
EDGE_COLOUR, UNKNOWN_COLOUR = "#888", "#555"


@dataclass(frozen=True)
class Node:
    """What a drawn step shows: its job's state, the URL of its job's page (None: no link, say
    when its job was deleted) and whether it runs on failure."""

    state: str
    url: str | None = None
    run_on_failure: bool = False


@dataclass(frozen=True)
class Layout:
    """The drawn steps, column by column, top to bottom, and how many steps were left out."""

    columns: list[list[str]]
    left_out: int

    @property
    def drawn(self) -> list[str]:
        """The names of the drawn steps, column by column."""
        return [name for column in self.columns for name in column]


def layers(after: Mapping[str, Iterable[str]]) -> dict[str, int]:
    """Return each step's layer: 0 without dependencies, else 1 + the highest layer of its ``after``.

    ``after`` maps every step's name to the names it waits for (names that are no step are
    ignored). Iterative (a chain of 10,000 steps recurses nowhere); steps on a cycle, which
    ``Workflow.enqueue`` refuses, are put after every other.
    """
    waits = {name: [u for u in dict.fromkeys(ups) if u in after and u != name] for name, ups in after.items()}
    downstream: dict[str, list[str]] = {name: [] for name in waits}
    pending = {name: len(ups) for name, ups in waits.items()}
    for name, ups in waits.items():
        for upstream in ups:
            downstream[upstream].append(name)
    layer = {name: 0 for name, n in pending.items() if n == 0}
    ready = list(layer)
    while ready:
        upstream = ready.pop()
        for name in downstream[upstream]:
            layer[name] = max(layer.get(name, 0), layer[upstream] + 1)
            pending[name] -= 1
            if pending[name] == 0:
                ready.append(name)
    placed = {name: layer[name] for name, n in pending.items() if n == 0}
    last = max(placed.values(), default=-1) + 1
    return {name: placed.get(name, last) for name in after}


def layout(after: Mapping[str, Sequence[str]], limit: int = MAX_NODES) -> Layout:
    """Place the steps of ``after`` (name -> names it waits for, in the order to show them) in
    columns by :func:`layers`; keep the first ``limit`` steps, column by column.

    Within a column a step sits near the steps it waits for (ordered by their mean row, then by
    the order of ``after``), which keeps fan-outs and fan-ins untangled.
    """
    depth = layers(after)
    order = {name: i for i, name in enumerate(after)}
    columns: list[list[str]] = [[] for _ in range(max(depth.values(), default=-1) + 1)]
    for name in after:
        columns[depth[name]].append(name)
    row: dict[str, float] = {}

    def place(name: str) -> tuple[float, int]:
        known = [row[u] for u in after[name] if u in row]  # the upstreams sit in earlier columns
        return (sum(known) / len(known) if known else -1.0, order[name])

    for column in columns:
        column.sort(key=place)
        row.update((name, float(i)) for i, name in enumerate(column))
    kept: list[list[str]] = []
    room = max(limit, 0)
    for column in columns:
        if room <= 0:
            break
        kept.append(column[:room])
        room -= len(kept[-1])
    return Layout(kept, len(after) - sum(len(c) for c in kept))


def draw(plan: Layout, after: Mapping[str, Iterable[str]], nodes: Mapping[str, Node]) -> SafeString:
    """Return the SVG markup of ``plan``: its nodes (``nodes`` by name; a missing one is drawn in
    grey, unlinked) and the edges of ``after`` between drawn steps. Names and URLs are escaped."""
    if not plan.columns:
        return mark_safe("")
    tallest = max(len(column) for column in plan.columns)
    pitch = NODE_H + ROW_GAP
    width = MARGIN * 2 + len(plan.columns) * NODE_W + (len(plan.columns) - 1) * COLUMN_GAP
    height = MARGIN * 2 + tallest * pitch - ROW_GAP
    where: dict[str, tuple[float, float]] = {}
    for i, column in enumerate(plan.columns):
        top = MARGIN + (tallest - len(column)) * pitch / 2  # each column centred on the tallest
        for j, name in enumerate(column):
            where[name] = (MARGIN + i * (NODE_W + COLUMN_GAP), top + j * pitch)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="taskmq-workflow" width="{width}" height="{height:.0f}" '
        f'viewBox="0 0 {width} {height:.0f}" font-family="sans-serif">',
        '<defs><marker id="taskmq-arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" '
        f'orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="{EDGE_COLOUR}"/></marker></defs>',
    ]
    for name in plan.drawn:  # edges first, so that nodes are drawn over them
        x2, y2 = where[name]
        for upstream in dict.fromkeys(after.get(name, ())):
            if upstream not in where:
                continue
            x1, y1 = where[upstream]
            start, end = (x1 + NODE_W, y1 + NODE_H / 2), (x2, y2 + NODE_H / 2)
            bend = (end[0] - start[0]) / 2
            parts.append(f'<path class="taskmq-edge" d="M {start[0]:.1f} {start[1]:.1f} C {start[0] + bend:.1f} '
                         f'{start[1]:.1f} {end[0] - bend:.1f} {end[1]:.1f} {end[0]:.1f} {end[1]:.1f}" fill="none" '
                         f'stroke="{EDGE_COLOUR}" stroke-width="1.2" marker-end="url(#taskmq-arrow)"/>')
    for name in plan.drawn:
        parts.append(_node(name, nodes.get(name), *where[name]))
    parts.append("</svg>")
    return mark_safe("".join(parts))  # noqa: S308 - numbers, and names, states and URLs escaped


def _node(name: str, node: Node | None, x: float, y: float) -> str:
    state = node.state if node else "?"
    colour = STATE_COLOURS.get(state, UNKNOWN_COLOUR)  # type: ignore[call-overload]
    dashed = node is not None and node.run_on_failure
    border = ' stroke="#222" stroke-width="2" stroke-dasharray="6 3"' if dashed else ""
    tip = f"{name}: {state}" + (" (runs on failure)" if dashed else "")
    label = escape(shorten(name, NAME_SHOWN))
    shape = (f'<title>{escape(tip)}</title>'
             f'<rect x="{x:.1f}" y="{y:.1f}" width="{NODE_W}" height="{NODE_H}" rx="4" fill="{colour}"{border}/>'
             f'<text x="{x + 8:.1f}" y="{y + 16:.1f}" font-size="12" fill="#fff">{label}</text>'
             f'<text x="{x + 8:.1f}" y="{y + 32:.1f}" font-size="10" fill="#fff">{escape(state)}</text>')
    css = f"taskmq-node taskmq-node-{escape(state.lower())}" + (" taskmq-node-on-failure" if dashed else "")
    if node is not None and node.url:
        return f'<a class="{css}" href="{escape(node.url)}">{shape}</a>'
    return f'<g class="{css}">{shape}</g>'


def workflow_svg(after: Mapping[str, Sequence[str]], nodes: Mapping[str, Node],
                 limit: int = MAX_NODES) -> tuple[SafeString, int]:
    """Lay out and draw a workflow: return the SVG markup and how many steps were left out."""
    plan = layout(after, limit)
    return draw(plan, after, nodes), plan.left_out
