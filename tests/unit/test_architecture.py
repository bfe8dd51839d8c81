"""The architecture's rules, read from the source: no import cycles (also inside functions), every
member used on a broker is declared on the Broker contract, nothing outside ``brokers/`` opens
a transaction on the broker's database, the ORM broker's engines are reached only through its
dialect seam (``brokers/orm/dialect.py``), so that a new engine is a new module, nothing outside
``brokers/`` imports ``brokers/orm/`` or a private name of ``brokers/``, and nothing outside
``brokers/`` writes a job, a schedule, a dead letter or their bookkeeping."""

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


# -- the broker owns its rows: nothing outside brokers/ writes them or reaches into brokers/orm/ --

#: The tables of jobs, schedules and dead letters and their bookkeeping: only the broker writes them.
BROKER_TABLES = {"Job", "Schedule", "DeadLetter", "IdempotencyKey", "UniqueKey", "QueuePause", "QueueState",
                 "FlowBucket", "Chore", "OutcomeCount", "TimingCount", "Cluster", "Workflow", "WorkflowStep",
                 "WorkflowEdge", "JobStep", "JobSignal"}
WRITES = {"save", "update", "delete", "create", "bulk_create", "bulk_update", "get_or_create", "update_or_create"}
#: Receivers that are a model row or a queryset of one without naming the model: the admin's
#: ``obj`` and ``queryset`` (ModelAdmin's hooks and actions).
ROW_NAMES = {"obj", "queryset"}


def _chain_names(node: ast.AST) -> set[str]:
    """The names an attribute or call chain starts from: ``Job.objects.filter(...)`` -> {"Job"}."""
    names = set()
    while isinstance(node, (ast.Attribute, ast.Call, ast.Subscript)):
        node = node.func if isinstance(node, ast.Call) else node.value
    if isinstance(node, ast.Name):
        names.add(node.id)
    return names


def direct_writes(source: str) -> list[tuple[str, int]]:
    """Writes of the broker's tables in ``source``: ``Job.objects....update()``, ``Schedule(...).save()``,
    ``item.save()`` of a parameter annotated with one of those models (in its function),
    ``queryset.update()``, ``obj.save()``: (what, line), in line order."""
    tree = ast.parse(source)
    found = set()
    scopes: list[ast.AST] = [tree, *(n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))]
    for scope in scopes:
        typed = set()  # this function's parameters annotated with a broker table
        if not isinstance(scope, ast.Module):
            typed = {a.arg for a in ast.walk(scope.args) if isinstance(a, ast.arg) and a.annotation is not None
                     and _chain_names(a.annotation) & BROKER_TABLES}
        for node in ast.walk(scope):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in WRITES:
                names = _chain_names(node.func.value)
                if names & (BROKER_TABLES | typed | ROW_NAMES):
                    found.add((f"{'/'.join(sorted(names))}...{node.func.attr}()", node.lineno))
    return sorted(found, key=lambda item: item[1])


def reaches_into_the_orm_broker(source: str, name: str) -> list[str]:
    """What the module ``name`` (its ``source``) imports of ``brokers/orm/`` (an engine, the dialect
    seam, any of its modules), and the private names it imports from ``brokers/``."""
    package = name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("django_taskmq.brokers.orm")}
        elif isinstance(node, ast.ImportFrom):
            target = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else [])) \
                if node.level else node.module or ""
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                if sub.startswith("django_taskmq.brokers.orm") or (
                        target.startswith("django_taskmq.brokers") and alias.name.startswith("_")):
                    found.add(target if target.startswith("django_taskmq.brokers.orm") and not _exists(sub) else sub)
    return sorted(found)


OUTSIDE_BROKERS = [p for p in SOURCES if "brokers" not in p.relative_to(PACKAGE).parts]


@pytest.mark.parametrize("path", OUTSIDE_BROKERS, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_nothing_outside_the_brokers_imports_the_orm_brokers_internals(path):
    """Engines and the dialect seam are the ORM broker's own: the rest asks ``brokers/`` (the
    contract, ``get_broker``, ``clock``, ``database``)."""
    assert reaches_into_the_orm_broker(path.read_text(), module_name(path)) == []


@pytest.mark.parametrize("path", [p for p in OUTSIDE_BROKERS if p.name != "models.py"],
                         ids=lambda p: str(p.relative_to(PACKAGE)))
def test_nothing_outside_the_brokers_writes_a_job_schedule_or_dead_letter(path):
    """Every write that changes a job, a schedule, a dead letter or their bookkeeping is the
    broker's (models.py defines them: ``Schedule.save`` is the model's own)."""
    assert direct_writes(path.read_text()) == [], f"{path.name} writes the broker's rows: ask the broker"


def test_the_write_rule_finds_direct_writes():
    """Each way the package wrote rows before the broker took them over is found."""
    source = '''
def report(reservation, stored):
    Job.objects.using(db).filter(pk=reservation.job_id).update(progress_report=stored)

def fire(item: Schedule) -> None:
    item.save(update_fields=["next_run"])

def made(name):
    Schedule.objects.using(db).update_or_create(name=name, defaults={})
    DeadLetter.objects.create(job_id="x")

class ScheduleAdmin:
    def pause(self, request, queryset):
        queryset.update(paused=True)

    def save_model(self, request, obj, form, change):
        obj.save()

def fine(item: Settings, options: dict):
    options.update(queue="a")
    item.save()
    cached_results.delete(["x"])
'''
    assert [line for _, line in direct_writes(source)] == [3, 6, 9, 10, 14, 17]


def test_the_import_rule_finds_the_orm_brokers_internals():
    """A module outside brokers/ importing an engine, the dialect seam or a private name is found;
    the public face of brokers/ is not."""
    source = ("from ..brokers.orm.dialect import dialect_named\nfrom ..brokers.orm import sqlite\n"
              "import django_taskmq.brokers.orm.mysql\nfrom ..brokers.clock import _private\n"
              "from ..brokers import get_broker, database\nfrom ..brokers.base import Broker\n")
    assert reaches_into_the_orm_broker(source, "django_taskmq.cluster.probe") == [
        "django_taskmq.brokers.clock._private", "django_taskmq.brokers.orm.dialect", "django_taskmq.brokers.orm.mysql",
        "django_taskmq.brokers.orm.sqlite"]

# The layers. Each rule names a part of the package and the parts it must never import, at module
# level or inside a function (imported_modules reads both). docs/architecture.rst's table of the
# folders is checked against PARTS below, and the page against the files.
PARTS = {
    "policy": "pure rules: no Django, nothing of django_taskmq outside policy/",
    "brokers": "the broker contract and its ORM implementation; the database outage log",
    "runtime": "the runtime of one task, shared by workers and sync mode",
    "observability": "statistics, metrics, histograms, health, terminal, job logs, error reports, tracing",
    "cluster": "the qcluster processes: sentinel, pusher, workers, monitor, scheduler",
    "admin": "the Django admin pages",
    "management": "the manage.py commands",
    "compat": "django-q2 compatibility",
    "backends": "Django's tasks framework backend",
    "contrib": "optional integrations (Sentry)",
    "testing": "test helpers for projects",
}
NEVER = {
    "brokers": ("runtime", "observability", "cluster", "admin", "management", "compat", "testing"),
    "runtime": ("cluster", "admin", "management"),
    "observability": ("cluster", "admin", "management"),
    "cluster": ("admin",),
}
# policy may raise the package's exceptions (a module free of Django).
POLICY_MAY = ("django_taskmq", "django_taskmq.exceptions")
# The claim path: what claims and hands out work. It must not import observability itself.
CLAIM_PATH = ("django_taskmq.cluster.pusher", "django_taskmq.cluster.feeder", "django_taskmq.cluster.buffer")
# Known exceptions, each with its reason; a new one fails the test.
KNOWN = {
    ("django_taskmq.cluster.pusher", "django_taskmq.observability.joblog"):
        "a package that fails its check is logged with the job's fields (joblog.fields)",
}


def part_of(module: str) -> str:
    """The folder of ``module`` ("" for a top-level module of django_taskmq)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in PARTS) else ""


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    found = []
    for module, imports in sorted(graph.items()):
        part = part_of(module)
        for target in sorted(imports):
            if (module, target) in KNOWN:
                continue
            if part == "policy" and part_of(target) != "policy" and target not in POLICY_MAY:
                found.append(f"{module} imports {target}: policy imports nothing outside policy/ but exceptions")
            elif part_of(target) in NEVER.get(part, ()):
                found.append(f"{module} imports {target}: {part}/ never imports {part_of(target)}/")
            elif module in CLAIM_PATH and part_of(target) == "observability":
                found.append(f"{module} imports {target}: the claim path never imports observability/")
    return found


def django_imports(path: Path) -> set[str]:
    return {alias.name for node in ast.walk(ast.parse(path.read_text()))
            for alias in (node.names if isinstance(node, ast.Import) else [])
            if alias.name.split(".")[0] == "django"} | {
        node.module for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "django"}


def test_no_module_imports_against_the_layers():
    graph = {module_name(p): imported_modules(p) for p in SOURCES}
    assert layer_violations(graph) == []


def test_policy_does_not_import_django():
    offenders = {module_name(p): sorted(django_imports(p)) for p in SOURCES
                 if part_of(module_name(p)) == "policy" and django_imports(p)}
    assert offenders == {}


@pytest.mark.parametrize("module, target", [
    ("django_taskmq.observability.health", "django_taskmq.cluster.sentinel"),
    ("django_taskmq.runtime.execution", "django_taskmq.cluster.worker"),
    ("django_taskmq.brokers.orm.broker", "django_taskmq.runtime.execution"),
    ("django_taskmq.policy.lease", "django_taskmq.models"),
    ("django_taskmq.cluster.pusher", "django_taskmq.observability.metrics"),
])
def test_an_import_against_the_layers_is_found(module, target):
    assert layer_violations({module: {target}})


def test_the_known_exceptions_still_exist():
    graph = {module_name(p): imported_modules(p) for p in SOURCES}
    assert [pair for pair in KNOWN if pair[1] not in graph.get(pair[0], set())] == []


def test_the_package_has_at_most_18_modules_at_the_top():
    top = sorted(p.stem for p in PACKAGE.glob("*.py"))
    assert len(top) <= 18, top
    # The deprecated old paths are answered by a finder (django_taskmq.MOVED), not by files.
    assert sorted(set(top) & set(django_taskmq.MOVED)) == []


def test_every_folder_is_a_part_with_rules():
    folders = sorted(p.name for p in PACKAGE.iterdir()
                     if (p / "__init__.py").exists() and p.name != "migrations")
    assert folders == sorted(PARTS)


ARCHITECTURE_PAGE = ROOT / "docs" / "architecture.rst"


def test_the_architecture_page_lists_every_folder_and_module_and_names_only_existing_ones():
    import re

    page = ARCHITECTURE_PAGE.read_text()
    named = set(re.findall(r"``(django_taskmq(?:\.\w+)+)``", page))
    paths = set(re.findall(r"``((?:\w+/)+\w+\.py)``", page))
    missing = sorted(m for m in named if not _exists(m) and not _attribute_exists(m)) + sorted(
        m for m in paths if not (ROOT / m).exists() and not (PACKAGE / m).exists())
    assert missing == [], "the architecture page names modules that do not exist"
    listed = set(re.findall(r"^\s+(?:\* )?- ``(\w+(?:/\w+)?)(?:\.py|/)``", page, re.M))
    wanted = {p.stem for p in PACKAGE.glob("*.py")} | {
        f"{part}/{p.stem}" for part in PARTS if part in ("runtime", "observability", "brokers", "cluster")
        for p in (PACKAGE / part).glob("*.py") if p.stem != "__init__"} | set(PARTS)
    assert sorted(wanted - listed) == [], "modules missing from the architecture page's table"


def _attribute_exists(dotted: str) -> bool:
    module, _, name = dotted.rpartition(".")
    if not _exists(module):
        return False
    import importlib

    try:
        return hasattr(importlib.import_module(module), name)
    except Exception:
        return False
