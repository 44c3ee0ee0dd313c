"""Dependencies point downwards only: every module imports on its own, and no import cycle exists.

The checks:

* each module is imported first thing in a process where no other repository module was imported
  (so it cannot lean on an import some other module happened to do earlier): a child forked from an
  interpreter that imported only the third-party packages;
* the import graph read from the source — every `import`, including those inside functions and
  under `TYPE_CHECKING`, because a lazy import only hides a cycle — has no cycle between modules,
  and none between top-level packages;
* every top-level package imports only the packages `PACKAGES_MAY_IMPORT` allows it (the table the
  README's "Rooms" draws), and inside `coordinator` every room only the rooms `ROOMS_MAY_IMPORT`
  allows it.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
PACKAGES = (
    "core",
    "security",
    "topics",
    "zk_rebalance",
    "coordinator",
    "testing",
    "pipeline",
    "migrate",
    "fuzz",
    "experiments",
    "demo",
    "cli",
)

# Which top-level package may import which (the README's "Rooms" draws this table): everything
# points down towards `core`, and a package imports only what its job needs.
PACKAGES_MAY_IMPORT: dict[str, set[str]] = {
    "core": set(),
    # TLS, SASL, ACLs and client security settings, shared by the node, its clients and the CLI
    "security": {"core"},
    "topics": {"core"},
    # scheme one reads the topics' partition counts and assignments from the 0.8 layout
    "zk_rebalance": {"core", "topics"},
    "coordinator": {"core", "topics", "security"},
    # ZooKeeper servers and ensembles in containers, for tests, benchmarks and experiments
    "testing": {"core"},
    "migrate": {"core", "security", "topics", "zk_rebalance", "coordinator"},
    # a consumer joins through a live migration's bridge while one runs (migrate.migration.bridge)
    "pipeline": {"core", "security", "topics", "zk_rebalance", "coordinator", "migrate"},
    "fuzz": {"core", "security", "topics", "coordinator", "testing"},
    "experiments": {"core", "security", "topics", "zk_rebalance", "coordinator", "testing", "pipeline"},
    "demo": {"core", "security", "topics", "coordinator", "migrate", "pipeline"},
    "cli": {"core", "security", "topics", "coordinator", "migrate", "pipeline", "experiments", "demo"},
}


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in sorted((REPO / pkg).rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            elif parts[-1] == "__main__":
                continue
            out[".".join(parts)] = path
    return out


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """The repository modules `name` imports anywhere in its source.

    Its own ancestor packages count only when it reads names from one (`from pkg import x`,
    `from . import x`, `import pkg`): importing `pkg.sibling` runs `pkg/__init__` first either
    way, but only then does the module need what that `__init__` binds, so a `pkg/__init__`
    that (re-)exports this module closes a real cycle. `from pkg.sibling import x` or
    `import pkg.sibling as sibling` leave the ancestor out.
    """
    found: set[str] = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets: list[str] = []
        read: list[str] = []  # the modules whose namespace this import reads
        if isinstance(node, ast.Import):
            targets = read = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
            read = [base]
        for target in targets:
            parts = target.split(".")
            for i in range(1, len(parts) + 1):  # importing a.b.c runs a and a.b too
                mod = ".".join(parts[:i])
                if mod != name and (not name.startswith(mod + ".") or mod in read) and mod in MODULES:
                    found.add(mod)
    return found


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components with more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[set[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    scc = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        scc.add(member)
                        if member == node:
                            break
                    if len(scc) > 1:
                        out.append(scc)
    return out


MODULE_CYCLES = _cycles(GRAPH)
PACKAGE_GRAPH: dict[str, set[str]] = {p: set() for p in PACKAGES}
for _name, _deps in GRAPH.items():
    for _dep in _deps:
        if _dep.split(".")[0] != _name.split(".")[0]:
            PACKAGE_GRAPH[_name.split(".")[0]].add(_dep.split(".")[0])
PACKAGE_CYCLES = _cycles(PACKAGE_GRAPH)


def _in_one_cycle(cycles: list[set[str]], a: str, b: str) -> bool:
    return any(a in c and b in c for c in cycles)


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_reading_a_sibling_through_the_own_package_is_an_import_of_its_init(tmp_path, monkeypatch):
    """`pkg/__init__` re-exports `pkg.mod`, and `pkg.mod` does `from pkg import sibling`: a cycle.

    Importing `pkg.sibling` runs `pkg/__init__` either way, but only `from pkg import ...` (or
    `from . import ...`, or `import pkg`) reads from it, so only those make `pkg` a dependency.
    """
    sources = {
        "pkg/__init__.py": "from pkg.mod import f\n",
        "pkg/mod.py": "from pkg import sibling\n",
        "pkg/rel.py": "from . import sibling\n",
        "pkg/direct.py": "from pkg.sibling import g\nimport pkg.sibling as sibling\n",
        "pkg/sibling.py": "",
    }
    fake = {}
    for rel, text in sources.items():
        path = tmp_path / rel
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
        parts = Path(rel).with_suffix("").parts
        fake[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    monkeypatch.setattr(sys.modules[__name__], "MODULES", fake)
    graph = {name: _imports(name, path) for name, path in fake.items()}
    assert graph == {
        "pkg": {"pkg.mod"},
        "pkg.mod": {"pkg", "pkg.sibling"},
        "pkg.rel": {"pkg", "pkg.sibling"},
        "pkg.direct": {"pkg.sibling"},
        "pkg.sibling": set(),
    }
    assert _cycles(graph) == [{"pkg", "pkg.mod"}]


@pytest.mark.parametrize(
    "a, b",
    [
        ("coordinator.assignors.sticky", "coordinator.assignors.sticky_general"),
        ("core.embedded", "core.zk"),
        ("coordinator.group.coordinator", "coordinator.group.membership_manager"),
        ("coordinator.group.membership_manager", "coordinator.group.offset_manager"),
        ("coordinator.group.group_manager", "coordinator.group.membership_manager"),
        # zk_rebalance/__init__ re-exports member, which read `fencing` through the package
        ("zk_rebalance", "zk_rebalance.member"),
        ("zk_rebalance", "zk_rebalance.rebalance"),
    ],
)
def test_no_module_cycle_between(a, b):
    assert a in MODULES and b in MODULES, "a module of this check was moved: update the pair"
    assert not _in_one_cycle(MODULE_CYCLES, a, b)


def test_no_module_cycle_at_all():
    assert MODULE_CYCLES == []


def test_no_package_cycle():
    assert PACKAGE_CYCLES == []


def test_core_depends_on_no_other_package():
    assert PACKAGE_GRAPH["core"] == set()


def test_every_package_imports_only_what_the_table_allows():
    assert set(PACKAGES_MAY_IMPORT) == set(PACKAGES)
    wrong = sorted(
        f"{name} imports {dep}"
        for name, deps in GRAPH.items()
        for dep in deps
        if dep.split(".")[0] not in {name.split(".")[0], *PACKAGES_MAY_IMPORT[name.split(".")[0]]}
    )
    assert wrong == []


def test_the_package_table_has_no_cycle():
    assert _cycles(PACKAGES_MAY_IMPORT) == []


def _third_party() -> list[str]:
    """The top-level packages outside the repository and the standard library that modules import."""
    names: set[str] = set()
    for path in MODULES.values():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names.add(node.module.split(".")[0])
    return sorted(names - set(PACKAGES) - set(sys.stdlib_module_names) - {"__future__", "tests"})


# Imports the third-party packages (top level only, as a module's own `import x` would), then forks
# a child per repository module that imports it first thing, two at a time: each child starts from
# an interpreter in which no repository module was imported, without paying for numpy, pyarrow or
# kazoo again. argv: the modules; prints one line per module that failed.
_IMPORT_EACH = """
import importlib, os, sys, traceback
for name in os.environ["THIRD_PARTY"].split():
    try:
        importlib.import_module(name)
    except Exception:
        pass  # an optional extra not installed: the module that needs it says so below
bad, running = [], {}
def reap():
    pid, status = os.wait()
    name, r = running.pop(pid)
    message = os.read(r, 65536).decode(errors="replace").strip()
    os.close(r)
    if os.waitstatus_to_exitcode(status):
        bad.append(name + ": " + (message.splitlines() or ["?"])[-1])
for name in sys.argv[1:]:
    if len(running) >= 2:
        reap()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        code = 0
        try:
            importlib.import_module(name)
        except BaseException:
            os.write(w, traceback.format_exc().encode())
            code = 1
        os._exit(code)
    os.close(w)
    running[pid] = (name, r)
while running:
    reap()
print("\\n".join(bad))
"""


def test_every_module_imports_on_its_own():
    """Each module imported first, in a process where no other repository module was imported."""
    env = dict(os.environ, THIRD_PARTY=" ".join(_third_party()), PYTHONPATH=str(REPO))
    out = subprocess.run(
        [sys.executable, "-c", _IMPORT_EACH, *MODULES],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "", out.stdout


def test_a_module_that_cannot_import_on_its_own_is_named(tmp_path):
    """The check above can fail: a module importing a name its package does not define is named."""
    (tmp_path / "broken_mod.py").write_text("from core.types import NoSuchName\n")
    env = dict(os.environ, THIRD_PARTY="", PYTHONPATH=f"{tmp_path}:{REPO}")
    out = subprocess.run(
        [sys.executable, "-c", _IMPORT_EACH, "core.types", "broken_mod"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.stdout.strip().startswith("broken_mod: ImportError"), out.stdout + out.stderr


# The rooms of `coordinator` and what each may import from the others (docs/coordinator.md).
ROOMS_MAY_IMPORT = {
    "coordinator.wire": set(),
    # the consumer protocol on the wire (consumer_protocol: JoinGroup's protocols, scheme two's
    # partition lists) is the assignors' payloads in the wire's structs
    "coordinator.assignors": {"coordinator.wire"},
    # the group reads consumer subscriptions' topics (assignors.payloads), as Kafka's coordinator does
    "coordinator.group": {"coordinator.wire", "coordinator.assignors"},
    # a member with ZooKeeper finds the nodes in their registrations (coordinator.layout's paths)
    "coordinator.member": {"coordinator.wire", "coordinator.assignors", "coordinator.layout"},
    # scheme two: the coordinator runs the assignors on the classic core (server-side assignment)
    "coordinator.server_side": {
        "coordinator.wire",
        "coordinator.group",
        "coordinator.assignors",
    },
    # Kafka's binary protocol (the Kafka listener's codec and record batches), pure
    "coordinator.kafka_wire": {"coordinator.wire"},
    # the /groupshift znodes: paths, names and the codecs of the group's records, pure
    "coordinator.layout": {"coordinator.group"},
    "coordinator.node": {
        "coordinator.wire",
        "coordinator.kafka_wire",
        "coordinator.group",
        "coordinator.layout",
        "coordinator.member",
        "coordinator.server_side",
    },
}


def _room(module: str) -> str | None:
    return next((r for r in ROOMS_MAY_IMPORT if module == r or module.startswith(r + ".")), None)


def test_coordinator_rooms_depend_downwards():
    wrong = sorted(
        f"{name} imports {dep}"
        for name, deps in GRAPH.items()
        if (room := _room(name))
        for dep in deps
        if (other := _room(dep)) and other != room and other not in ROOMS_MAY_IMPORT[room]
    )
    assert wrong == []


def test_every_coordinator_module_is_in_a_room():
    loose = [m for m in MODULES if m.startswith("coordinator.") and _room(m) is None]
    assert loose == []


# ---------------------------------------------------------------------------------------------
# What a process pays to start: every CLI command is a process (the tests spawn hundreds). cli.main
# imports a command's module when the command runs, and `--help` imports every one of them, so
# whatever a cli/cmd_*.py imports at module level, `--help` pays for. Facts, not timings
# (bench/cli_startup.py times them).

HEAVY_FOR_THE_CLI = ("pyspark", "pandas", "pyarrow", "pyarrow.compute", "numpy", "kazoo.client", "asyncio")


def _fresh(code: str, *args: str) -> str:
    """Run `code` first thing in a fresh interpreter and return what it printed."""
    out = subprocess.run(
        [sys.executable, "-c", code, *args], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_registering_every_command_imports_no_data_stack():
    """`--help` (and every command before it runs) needs click, not the data plane or a ZooKeeper
    client: heavy imports belong inside the command functions that use them."""
    code = (
        "import importlib, sys, cli.main\n"
        "for module in cli.main.COMMANDS.values():\n"
        "    importlib.import_module(module)\n"
        f"print(sorted(m for m in {HEAVY_FOR_THE_CLI!r} if m in sys.modules))"
    )
    assert _fresh(code) == "[]"


def _imports_in(path: Path, function: str) -> list[str]:
    """The repository modules `function` (in `path`) imports in its body: the commands import lazily."""
    fn = next(
        n
        for n in ast.walk(ast.parse(path.read_text()))
        if isinstance(n, ast.FunctionDef) and n.name == function
    )
    out = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.update(
                f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in MODULES else node.module
                for a in node.names
            )
    return sorted(m for m in out if m in MODULES)


# `groups list` reads two listings (and the znodes of each group it finds): the /groupshift layout
# (`coordinator.layout`) and Kafka 0.8's (`zk_rebalance.layout`) are pure, so it needs neither the
# coordinator node's store (asyncio), nor the group core's outputs, nor scheme one's member, nor the log.
NOT_FOR_GROUPS_LIST = (
    "asyncio",
    "coordinator.node",
    "coordinator.group.messages",
    "zk_rebalance.member",
    "pyarrow",
    "numpy",
)


def test_listing_groups_imports_no_coordinator_node_member_nor_log():
    """The modules `groupshift groups list` imports (its function's and `zk_session`'s, which
    connects), imported after `cli.main`: none of NOT_FOR_GROUPS_LIST comes with them."""
    modules = sorted(
        {
            *_imports_in(REPO / "cli" / "cmd_groups.py", "list_"),
            *_imports_in(REPO / "cli" / "inspect_common.py", "zk_session"),
        }
    )
    assert "migrate.groups.listing" in modules and "migrate.schemes.zkio" in modules, modules
    code = (
        f"import sys, cli.main, {', '.join(modules)}\n"
        f"print(sorted(m for m in {NOT_FOR_GROUPS_LIST!r} if m in sys.modules))"
    )
    assert _fresh(code) == "[]"


DATA_PATH = """
import sys

import pyarrow as pa

from core.types import TopicPartition
from coordinator.kafka_wire.records import decode_batches, encode_batch
from topics.arrow import binary_array
from topics.fetcher import records
from topics.log import Log

log = Log(sys.argv[1])
log.create("t", 3)
log.produce("t", [(b"k", b"v"), (None, b"w"), ("s", "x", 5), {"value": b"y", "timestamp": 7}])  # keyed
log.produce("t", [b"a", b"b"], partition=1)
log.produce("t", pa.table({"value": binary_array([b"c"])}), partition=2)  # columnar
written = sum(log.latest(TopicPartition("t", p)) for p in range(3))
for p in range(3):
    tp = TopicPartition("t", p)
    batch = log.read(tp, log.earliest(tp), 100).batch
    assert log.read(tp, log.latest(tp), 100).batch.num_rows == 0
    if batch.num_rows:
        data, n = encode_batch(batch, 1 << 20)  # a Kafka Fetch answer, and a Produce of it back
        log.produce("t", decode_batches(data), partition=p)
        assert len(records(tp, batch)) == n == batch.num_rows
assert log.offset_for_time(TopicPartition("t", 1), 0) is not None
print(written, "pandas" in sys.modules)
"""


def test_producing_and_reading_through_the_log_does_not_import_pandas(tmp_path):
    """pyarrow imports pandas (~300 ms) when it converts Python or numpy data, a tz-aware timestamp,
    or a compute call's scalar: the log, its fetcher and the Kafka record batches, which run in
    CLI processes and coordinator nodes, build their arrays from buffers (topics/arrow.py)."""
    assert _fresh(DATA_PATH, str(tmp_path)) == "7 False"


def test_every_command_module_is_in_the_cli_table():
    """cli.main imports a command's module only when the command runs: its table names every
    cli/cmd_*.py, and importing each module registers exactly the command the table gives it."""
    script = (
        "import importlib, click, cli.main as m\n"
        "for name, module in sorted(m.COMMANDS.items()):\n"
        "    before = set(m.main.commands)\n"
        "    importlib.import_module(module)\n"
        "    print(name, sorted(set(m.main.commands) - before))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, check=True)
    from cli.main import COMMANDS

    assert out.stdout.splitlines() == [f"{name} {[name]}" for name in sorted(COMMANDS)], out.stdout
    modules = {f"cli.{p.stem}" for p in (REPO / "cli").glob("cmd_*.py")}
    assert set(COMMANDS.values()) == modules
