"""The architecture's rules, read from the source: no import cycles (also inside functions), every
member used on a broker is declared on the Broker contract, nothing outside ``brokers/`` opens
a transaction on the broker's database, and the ORM broker's engines are reached only through its
dialect seam (``brokers/orm/dialect.py``), so that a new engine is a new module."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import django_taskmq
from django_taskmq.brokers.base import Broker

PACKAGE = Path(django_taskmq.__file__).parent
ROOT = PACKAGE.parent
SOURCES = sorted(p for p in PACKAGE.rglob("*.py") if "migrations" not in p.parts)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _exists(module: str) -> bool:
    base = ROOT / module.replace(".", "/")
    return base.with_suffix(".py").exists() or (base / "__init__.py").exists()


def imported_modules(path: Path) -> set[str]:
    """Every django_taskmq module ``path`` imports, at module level or inside functions."""
    name = module_name(path)
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("django_taskmq")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("django_taskmq"):
                for alias in node.names:  # "from . import recorder" imports a module
                    sub = f"{target}.{alias.name}"
                    found.add(sub if _exists(sub) else target)
    found.discard(name)
    return {m for m in found if _exists(m)}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_no_module_imports_one_that_imports_it_back():
    graph = {module_name(p): imported_modules(p) for p in SOURCES}
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or [])


def test_the_cycle_finder_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def broker_members_used(path: Path) -> set[tuple[str, int]]:
    """``broker.x``, ``self.broker.x`` and ``get_broker().x`` in ``path``: (x, line)."""
    used = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Attribute):
            continue
        owner = node.value
        if (isinstance(owner, ast.Name) and owner.id == "broker") or (
                isinstance(owner, ast.Attribute) and owner.attr == "broker") or (
                isinstance(owner, ast.Call) and isinstance(owner.func, ast.Name) and owner.func.id == "get_broker"):
            used.add((node.attr, node.lineno))
    return used


@pytest.mark.parametrize("path", [p for p in SOURCES if "brokers" not in p.parts], ids=lambda p: p.name)
def test_every_member_used_on_a_broker_is_declared_on_the_contract(path):
    undeclared = sorted((attr, line) for attr, line in broker_members_used(path) if not hasattr(Broker, attr)
                        and attr not in Broker.__annotations__)
    assert undeclared == [], f"{path.name} uses members the Broker ABC does not declare: {undeclared}"


CONTRACT_SUITE = sorted(p for p in (ROOT / "tests" / "contract").glob("*.py") if p.name != "__init__.py")


@pytest.mark.parametrize("path", CONTRACT_SUITE, ids=lambda p: p.name)
def test_the_contract_suite_uses_the_broker_only_through_the_abc(path):
    """So another broker (Redis) can run the same suite: its tests, fixtures and helpers."""
    undeclared = sorted({attr for attr, _ in broker_members_used(path) if not hasattr(Broker, attr)
                         and attr not in Broker.__annotations__})
    assert undeclared == [], f"{path.name} uses members the Broker ABC does not declare: {undeclared}"


TRANSACTIONS = {"atomic", "select_for_update", "write_transaction", "on_commit", "set_autocommit"}


def transaction_calls(path: Path) -> list[tuple[str, int]]:
    """Calls that open or hook into a database transaction directly: ``transaction.atomic(...)``,
    ``qs.select_for_update()``, ... (``broker.atomic()`` is asking the broker, and allowed)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in TRANSACTIONS:
            owner = node.func.value
            asks_broker = (isinstance(owner, ast.Name) and owner.id == "broker") or (
                isinstance(owner, ast.Attribute) and owner.attr == "broker")
            if not asks_broker:
                found.append((node.func.attr, node.lineno))
    return found


@pytest.mark.parametrize("path", [p for p in SOURCES if "brokers" not in p.parts], ids=lambda p: p.name)
def test_only_brokers_open_transactions(path):
    assert transaction_calls(path) == [], f"{path.name} opens a transaction itself: ask the broker (Broker.atomic)"


ORM = PACKAGE / "brokers" / "orm"


def registers_a_dialect(path: Path) -> bool:
    """An engine module: it calls ``register(...)`` at module level."""
    return any(isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
               and isinstance(node.value.func, ast.Name) and node.value.func.id == "register"
               for node in ast.parse(path.read_text()).body)


ENGINES = sorted(p for p in ORM.glob("*.py") if registers_a_dialect(p))


def test_the_engine_modules_are_found():
    assert [p.stem for p in ENGINES] == ["mysql", "postgresql", "sqlite"]


# The engines' own helpers (notify_probe.py: PostgreSQL's LISTEN probe) may import them.
NEUTRAL = [p for p in SOURCES if p.parent != ORM or p.stem in ("__init__", "broker", "dialect", "flow", "sql", "wakeup")]


@pytest.mark.parametrize("path", NEUTRAL, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_but_the_engines_own_imports_an_engine_module(path):
    """The broker, flow control, the cluster, the checks: each asks the dialect (dialect_for,
    dialect_named), never an engine module, which is the only place an engine's code lives."""
    engines = {module_name(p) for p in ENGINES}
    assert imported_modules(path) & engines == set()


@pytest.mark.parametrize("path", sorted((PACKAGE / "brokers").rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_the_brokers_import_nothing_of_the_cluster(path):
    assert not {m for m in imported_modules(path) if m.startswith("django_taskmq.cluster")}


def test_every_engine_module_registers_a_complete_dialect_named_for_its_vendor():
    from django_taskmq.brokers.clock import Clock
    from django_taskmq.brokers.orm.dialect import dialect_named

    for path in ENGINES:
        dialect = dialect_named(path.stem)
        assert dialect is not None and dialect.vendor == path.stem
        assert isinstance(dialect.clock, Clock) and isinstance(dialect.row_locks, bool) and dialect.greatest
        assert dialect.name
        assert dialect.seconds_between("b", "a")  # every engine's own: the base has none
