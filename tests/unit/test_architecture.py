"""The house plan holds: no import cycles, and each layer imports only what it may.

The import graph is read from the source (every ``import`` and ``from ... import``, at module
level or inside functions; ``if TYPE_CHECKING:`` blocks are annotations only and skipped), so
an import hidden inside a function still counts. Layers (see ARCHITECTURE.md):

- domain: ``cascade.*`` except ``cascade.platform``: no I/O libraries, never the platform,
  the services or the programs;
- platform: ``cascade.platform``: the domain and I/O libraries, never services or programs;
- services: ``services.<name>``: the library, never another service or a program;
- programs: ``programs.*``: anything.
"""

from __future__ import annotations

import ast
import functools
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.paths import REPO

ROOTS = {"cascade": REPO / "shared" / "cascade", "services": REPO / "services",
         "programs": REPO / "programs"}
#: Third-party packages that talk to the network, the bus or storage.
IO_LIBRARIES = ("nats", "aiohttp", "aiobotocore", "botocore", "boto3", "prometheus_client",
                "kubernetes_asyncio")


def _modules() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for root, path in ROOTS.items():
        for file in path.rglob("*.py"):
            parts = [root, *file.relative_to(path).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = file
    return out


MODULES = _modules()


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST) -> Iterator[tuple[str, list[str]]]:
    """(module, names) of every import, skipping ``if TYPE_CHECKING:`` bodies."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, []
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module, [a.name for a in node.names]
        stack.extend(ast.iter_child_nodes(node))


def _owner(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


@functools.cache
def _graph() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(internal module -> modules it imports, module -> external top-level packages); read when a
    test first asks, not while the suite is collected."""
    internal: dict[str, set[str]] = defaultdict(set)
    external: dict[str, set[str]] = defaultdict(set)
    for module, file in MODULES.items():
        for target, names in _imports(ast.parse(file.read_text(), str(file))):
            subs = [f"{target}.{n}" for n in names if f"{target}.{n}" in MODULES]
            targets = subs if subs and len(subs) == len(names) else [target, *subs]
            for t in targets:
                owner = _owner(t)
                if owner is None:
                    external[module].add(t.split(".")[0])
                elif owner != module and not module.startswith(owner + "."):
                    internal[module].add(owner)  # a package's own __init__ is not an edge
    return internal, external



def _cycles(nodes: list[str], edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one member (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for start in nodes:
        if start in index:
            continue
        work = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


def package_of(module: str) -> str:
    """``cascade.engine.perf`` -> ``cascade.engine``; ``services.api.routes.x`` -> ``services.api``."""
    parts = module.split(".")
    return ".".join(parts[:2])


def _layer(module: str) -> str:
    if module.startswith("cascade.platform"):
        return "platform"
    return {"cascade": "domain", "services": "services", "programs": "programs"}[module.split(".")[0]]


def test_the_graph_is_read() -> None:
    assert len(MODULES) > 100
    assert "cascade.platform.keys" in _graph()[0]["cascade.platform.tracestore"]
    assert "nats" in _graph()[1]["cascade.platform.bus.connection"]


def test_no_module_imports_itself_round_a_cycle() -> None:
    assert _cycles(sorted(MODULES), _graph()[0]) == []


def test_no_cycle_between_packages() -> None:
    edges: dict[str, set[str]] = defaultdict(set)
    for module, targets in _graph()[0].items():
        for target in targets:
            a, b = package_of(module), package_of(target)
            if a != b and b != "cascade":  # the root package's __init__ is only the version
                edges[a].add(b)
    assert _cycles(sorted({package_of(m) for m in MODULES}), edges) == []


@pytest.mark.parametrize("layer", ["domain", "platform", "services"])
def test_each_layer_imports_only_what_it_may(layer: str) -> None:
    bad = []
    for module, targets in sorted(_graph()[0].items()):
        if _layer(module) != layer:
            continue
        for target in sorted(targets):
            t = _layer(target)
            if (layer == "domain" and t != "domain") or (layer == "platform" and t in (
                    "services", "programs")):
                bad.append(f"{module} -> {target}")
            if layer == "services" and (t == "programs" or (
                    t == "services" and package_of(target) != package_of(module))):
                bad.append(f"{module} -> {target}")
        if layer == "domain":
            bad += [f"{module} -> {lib}" for lib in sorted(_graph()[1][module]) if lib in IO_LIBRARIES]
    assert bad == []


def test_the_cycle_check_fails_on_a_cycle() -> None:
    assert _cycles(["a", "b", "c"], {"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c"]]
    assert _cycles(["a", "b"], {"a": {"b"}}) == []


def test_nothing_starts_the_cli_by_the_old_module_name() -> None:
    """The CLI is ``programs.cli`` (``python -m cascade`` no longer exists)."""
    stale = [str(file.relative_to(REPO)) for file in MODULES.values()
             if '"-m", "cascade"' in file.read_text() or "-m cascade up" in file.read_text()]
    assert stale == []


#: Lines an api route module may have: handlers only (bodies in ``services.api.schemas``, logic
#: in the library or a small module of the api).
MAX_ROUTE_MODULE_LINES = 400


def test_api_route_modules_hold_handlers_only() -> None:
    routes = REPO / "services" / "api" / "routes"
    long = {str(file.relative_to(REPO)): n for file in sorted(routes.glob("*.py"))
            if (n := len(file.read_text().splitlines())) > MAX_ROUTE_MODULE_LINES}
    assert long == {}


#: Lines a library or service module may have (programs are exempt).
MAX_MODULE_LINES = 800


def test_library_and_service_modules_stay_short_and_trace_readers_skip_the_engine() -> None:
    """No module of ``shared/cascade`` or ``services`` over :data:`MAX_MODULE_LINES` lines; the
    trace readers (``cascade.traces``) import nothing of ``cascade.engine`` (the op families they
    need are ``cascade.opfamilies``), not even for annotations."""
    long = {str(file.relative_to(REPO)): n for name, file in sorted(MODULES.items())
            if not name.startswith("programs")
            and (n := len(file.read_text().splitlines())) > MAX_MODULE_LINES}
    assert long == {}
    engine = []
    for name, file in sorted(MODULES.items()):
        if name == "cascade.traces" or name.startswith("cascade.traces."):
            for node in ast.walk(ast.parse(file.read_text(), str(file))):
                targets = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                           [f"{node.module}.{a.name}" for a in node.names]
                           if isinstance(node, ast.ImportFrom) else [])
                engine += [f"{name} -> {t}" for t in targets
                           if t == "cascade.engine" or t.startswith("cascade.engine.")]
    assert engine == []


def test_a_unit_test_starts_no_process() -> None:
    """The unit tier's guard (``tests/unit/conftest.py``): a test here that starts a process, by
    ``subprocess``, ``asyncio`` or ``multiprocessing``, fails naming the tier it belongs to."""
    import asyncio
    import multiprocessing
    import subprocess
    import sys

    with pytest.raises(AssertionError, match="tests/integration"):
        subprocess.run([sys.executable, "-c", "pass"], check=False)

    async def child() -> None:
        await asyncio.create_subprocess_exec(sys.executable, "-c", "pass")

    with pytest.raises(AssertionError, match="tests/integration"):
        asyncio.run(child())
    with pytest.raises(AssertionError, match="tests/integration"):
        multiprocessing.get_context("fork").Process(target=print).start()
