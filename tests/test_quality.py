"""Lint, strict typing and the architecture's import rules, as part of the test run.

The tools run as background jobs (tests/background.py): beside the suite, on the
core it leaves idle, and these tests read their results at the end.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

import background

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

TOOLS = {
    "ruff": ("ruff", "check", "src", "tests", "benchmarks", "noxfile.py"),
    "ruff-format": ("ruff", "format", "--check", "src", "tests", "benchmarks", "noxfile.py"),
    "mypy-strict": ("mypy",),
    "import-rules": ("lint-imports",),
}


def _register(name: str, cmd: tuple[str, ...]) -> None:
    @background.job(f"quality-{name}")
    def _prepare(workdir: Path) -> background.Command:
        return background.Command([str(BIN / cmd[0]), *cmd[1:]], cwd=ROOT, timeout=900)


for _name, _cmd in TOOLS.items():
    _register(_name, _cmd)


@pytest.mark.parametrize(
    "name",
    [pytest.param(name, marks=pytest.mark.background(f"quality-{name}")) for name in TOOLS],
)
def test_tool_passes(name: str) -> None:
    """When this fails, run the same command locally and fix what it reports."""
    result = background.result(f"quality-{name}")
    cmd = " ".join(TOOLS[name])
    assert result.returncode == 0, f"{cmd} failed:\n{result.stdout}\n{result.stderr}"


def test_import_does_no_work() -> None:
    """Importing the package must not start clients, threads or connections."""
    code = (
        "import threading, sys; before = threading.active_count();"
        "import agent_memory, agent_memory.bootstrap, agent_memory.entrypoints.cli;"
        "assert threading.active_count() == before, 'a thread started at import';"
        "bad = [m for m in ('redis', 'psycopg', 'qdrant_client', 'httpx') if m in sys.modules];"
        "assert not bad, f'infrastructure imported at import time: {bad}'"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr


def import_cycles(package: str) -> list[str]:
    """Each set of `package`'s modules that import one another in a circle, as
    the imports among them (grimp counts lazy and TYPE_CHECKING imports too)."""
    graph = grimp.build_graph(package, cache_dir=None)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[str] = []

    def visit(module: str) -> None:  # Tarjan's strongly connected components
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component: list[str] = []
            while not component or component[-1] != module:
                component.append(stack.pop())
                on_stack.discard(component[-1])
            if len(component) > 1:
                found.append(_describe(graph, sorted(component)))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return found


def _describe(graph: grimp.ImportGraph, modules: list[str]) -> str:
    lines = [f"import cycle among {', '.join(modules)}:"]
    for importer in modules:
        for imported in sorted(graph.find_modules_directly_imported_by(importer)):
            if imported in modules:
                details = graph.get_import_details(importer=importer, imported=imported)
                at = ", ".join(f"l.{d['line_number']}" for d in details)
                lines.append(f"  {importer} -> {imported} ({at})")
    return "\n".join(lines)


def test_no_import_cycle_among_agent_memory_modules() -> None:
    """The package reads top to bottom: no module imports, even lazily, one that imports it."""
    cycles = import_cycles("agent_memory")
    assert not cycles, "\n".join(cycles)


def test_the_cycle_check_sees_a_lazy_import(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check above can fail: a circle closed by an import inside a function counts."""
    pkg = tmp_path / "circle_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from circle_pkg.b import B\n")
    (pkg / "b.py").write_text("class B:\n    def f(self):\n        from circle_pkg import a\n")
    (pkg / "c.py").write_text("from circle_pkg import b\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    (cycle,) = import_cycles("circle_pkg")
    assert cycle.splitlines()[0] == "import cycle among circle_pkg.a, circle_pkg.b:"
    assert "circle_pkg.b -> circle_pkg.a (l.3)" in cycle


def private_imports_across_packages(src: Path) -> list[str]:
    """Each `from agent_memory.X import _name` (or of a `_module`) whose importer
    lives in another package than the one defining the name (a sub-package
    counts as another): a private name is an implementation detail of its own
    package. Public names of private modules (`adapters/_common`) are not counted."""
    found = []
    for path in sorted(src.rglob("*.py")):
        parts = path.relative_to(src).with_suffix("").parts
        importer = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        home = importer if parts[-1] == "__init__" else importer.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom) or node.level or not node.module:
                continue
            if not node.module.startswith("agent_memory"):
                continue
            for alias in node.names:
                if not alias.name.startswith("_") or alias.name.startswith("__"):
                    continue
                owner = node.module
                # a private module of package `owner`, or a private name of module `owner`
                is_package = (src / owner.replace(".", "/") / "__init__.py").exists()
                package = owner if is_package else owner.rpartition(".")[0]
                if home != package:
                    found.append(f"{importer} imports {alias.name} from {owner} (l.{node.lineno})")
    return found


def test_no_private_name_is_imported_across_packages(tmp_path: Path) -> None:
    """When this fails, make the name public in its module (no underscore, in
    `__all__`) or move the caller next to it."""
    assert private_imports_across_packages(ROOT / "src") == []
    bad = tmp_path / "agent_memory" / "services" / "portability"
    bad.mkdir(parents=True)
    for package in (bad.parents[1], bad.parent, bad):
        (package / "__init__.py").write_text("")
    (bad / "x.py").write_text("from agent_memory.services.user_memory import _x\n")
    (bad / "y.py").write_text("from agent_memory.services.portability.transfer import _y\n")
    assert private_imports_across_packages(tmp_path) == [
        "agent_memory.services.portability.x imports _x from "
        "agent_memory.services.user_memory (l.1)"
    ]


def test_the_cli_is_an_entry_point() -> None:
    """`agent_memory.cli` moved to `agent_memory.entrypoints.cli` (no alias left behind)."""
    assert importlib.util.find_spec("agent_memory.cli") is None
    assert importlib.util.find_spec("agent_memory.entrypoints.cli") is not None
    assert importlib.util.find_spec("agent_memory.entrypoints.cli.__main__") is not None


def test_memory_is_importable_where_it_was() -> None:
    """`Memory` and `Stores` live in bootstrap.memory; their old homes still name them."""
    import agent_memory
    from agent_memory import bootstrap

    connect = importlib.import_module("agent_memory.bootstrap.connect")
    memory = importlib.import_module("agent_memory.bootstrap.memory")
    assert connect.Memory is memory.Memory is bootstrap.Memory is agent_memory.Memory
    assert connect.Stores is memory.Stores is bootstrap.Stores


def test_capabilities_import_without_the_conformance_extra() -> None:
    """A production module declares its `Capabilities` (and types its conformance
    factory) on the base install: with pytest, pytest-asyncio and hypothesis
    unimportable, the ports module and both contract_tests paths still give the
    one class, and importing them loads none of the test libraries."""
    code = (
        "import sys\n"
        "BLOCKED = ('pytest', '_pytest', 'pytest_asyncio', 'hypothesis')\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in BLOCKED:\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "        return None\n"
        "sys.meta_path.insert(0, Block())\n"
        "from agent_memory.ports.capabilities import Capabilities, ConformanceFactory\n"
        "from agent_memory.contract_tests import Capabilities as Again\n"
        "from agent_memory.contract_tests.capabilities import Capabilities as Third\n"
        "assert Capabilities is Again is Third\n"
        "class Factory:\n"
        "    capabilities = Capabilities(reopen=False)\n"
        "    def __call__(self): return object()\n"
        "assert isinstance(Factory(), ConformanceFactory)\n"
        "assert Capabilities(keyword_search=True).keyword_search\n"
        "loaded = [m for m in sys.modules if m.split('.')[0] in BLOCKED]\n"
        "assert not loaded, loaded\n"
        "try:\n"
        "    from agent_memory.contract_tests import MemoryStoreContract\n"
        "except ImportError as exc:\n"
        "    assert 'agent-memory[conformance]' in str(exc), exc\n"
        "else:\n"
        "    raise AssertionError('the contract classes imported without pytest')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
