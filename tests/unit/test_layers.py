"""The import graph of ``leveret`` (docs/architecture.md, "Layers"): each part imports only
the parts below it in ``LAYERS``, the graph has no cycle, and ``protocol/``, ``model/`` and
``convert/`` neither import asyncio or socket nor read the clock.

Every import counts: at module level, inside functions and under ``TYPE_CHECKING``, since
each is a dependency a reader has to follow. ``from package import name`` depends on the
submodule ``package.name`` when there is one, else on ``package``; a package's
``__init__`` importing its own submodules is not a cycle."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

# Left out of the compiled pass (scripts/test): reads the source, imports none of it.
pytestmark = pytest.mark.pure_only

SRC = Path(__file__).resolve().parents[2] / "src" / "leveret"

# Each part of leveret (a subpackage, or a top-level module) -> the parts it may import
# besides itself. A part missing here fails the test: a new one takes its place on purpose.
LAYERS: dict[str, frozenset[str]] = {
    # The bottom: the error hierarchy, the version, settings, which build runs.
    "errors": frozenset(),
    "leveret": frozenset(),  # __init__.py: __version__
    "config": frozenset(),
    "build_info": frozenset(),  # names the compiled modules; imports them by name only
    # Sans-IO codecs and the broker core: nothing of leveret but its errors.
    "protocol": frozenset({"errors"}),
    "model": frozenset({"errors"}),
    # Message conversion: the codecs' forms of a message and the core's container, sans-IO.
    "convert": frozenset({"errors", "protocol", "model"}),
    # Durability sees the model's types and the stream protocol's chunk format.
    "store": frozenset({"errors", "model", "protocol"}),
    # Users and permissions: the SASL codec, and the store's durable files for auth.json.
    "auth": frozenset({"errors", "protocol", "store"}),
    # The asyncio adapters, the control socket and the composition root: all of the above.
    "server": frozenset(
        {"errors", "leveret", "config", "build_info", "protocol", "model", "convert", "store"}
        | {"auth"}
    ),
    # Above the server: the links it runs (shovels, federation: clients of this and other
    # brokers), its HTTP plane (which shows them), the process that plugs them in, the CLI.
    "links": frozenset({"errors", "leveret", "protocol", "model", "convert", "auth", "server"}),
    "management": frozenset(
        {"errors", "leveret", "protocol", "model", "convert", "auth", "server", "links"}
    ),
    # A node of a cluster (etcd's metadata applied to the server's model): beside
    # management/, above the server; only assembly.py plugs it in.
    "cluster": frozenset(
        {"errors", "leveret", "config", "protocol", "model", "convert", "store", "auth"}
        | {"server"}
    ),
    "assembly": frozenset({"config", "server", "management", "cluster", "links"}),
    # The CLI; --workers' supervisor starts an etcd (cluster/etcd_process.py).
    "cli": frozenset({"leveret", "config", "server", "store", "assembly", "cluster"}),
    "__main__": frozenset({"cli"}),
    # Beside them: the Spark connector speaks the protocols as a client.
    "spark": frozenset({"errors", "protocol"}),
    # Test helpers for users' suites: a broker in process, clients, a clock.
    "testing": frozenset(
        {"errors", "config", "protocol", "model", "convert", "auth", "server", "assembly"}
        | {"cluster"}
    ),
}
FORBIDDEN_MODULES = ("asyncio", "socket", "time")
SANS_IO = ("protocol", "model", "convert")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(path): path for path in sorted(SRC.rglob("*.py"))}


def _imported_names(tree: ast.Module) -> list[str]:
    """Every module name an import statement names (absolute imports only: the source has
    no relative ones, which ``test_no_relative_imports`` keeps so)."""
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                names.append(submodule if submodule in MODULES else node.module)
    return names


def _dependencies(name: str, tree: ast.Module) -> set[str]:
    """The leveret modules ``name`` imports (an import of a name inside a module counts
    as one of that module)."""
    found = set()
    for imported in _imported_names(tree):
        parts = imported.split(".")
        while parts and ".".join(parts) not in MODULES:
            parts.pop()
        target = ".".join(parts)
        if parts and parts[0] == "leveret" and target != name:
            found.add(target)
    return found


def _part(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "leveret"


@cache
def _tree(name: str) -> ast.Module:
    path = MODULES[name]
    return ast.parse(path.read_text(), str(path))


def _graph() -> dict[str, set[str]]:
    return {name: _dependencies(name, _tree(name)) for name in MODULES}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a path that ends where it starts, or None."""
    done: set[str] = set()
    for start in sorted(graph):
        if start in done:
            continue
        path: list[str] = []
        on_path: set[str] = set()
        stack: list[tuple[str, list[str]]] = [(start, sorted(graph[start]))]
        path.append(start)
        on_path.add(start)
        while stack:
            node, todo = stack[-1]
            if not todo:
                stack.pop()
                path.pop()
                on_path.discard(node)
                done.add(node)
                continue
            nxt = todo.pop()
            if nxt in on_path:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in done and nxt in graph:
                stack.append((nxt, sorted(graph[nxt])))
                path.append(nxt)
                on_path.add(nxt)
    return None


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Each import of a part that ``LAYERS`` does not allow, as ``a -> b``."""
    return sorted(
        f"{module} -> {target}"
        for module, targets in graph.items()
        for target in targets
        if _part(target) != _part(module) and _part(target) not in LAYERS[_part(module)]
    )


def test_every_part_has_its_place_in_the_table() -> None:
    assert {_part(name) for name in MODULES} == set(LAYERS)


def test_no_import_goes_up_or_sideways() -> None:
    assert upward_imports(_graph()) == []


def test_the_import_graph_has_no_cycle() -> None:
    assert find_cycle(_graph()) is None


def test_no_relative_imports() -> None:
    for name in MODULES:
        for node in ast.walk(_tree(name)):
            assert not (isinstance(node, ast.ImportFrom) and node.level), name


@pytest.mark.parametrize("layer", SANS_IO)
def test_sans_io_layers_touch_no_loop_socket_or_clock(layer: str) -> None:
    modules = [name for name in MODULES if _part(name) == layer]
    assert modules
    for module in modules:
        for name in _imported_names(_tree(module)):
            assert name.split(".")[0] not in FORBIDDEN_MODULES, f"{module}: imports {name}"


def test_the_checks_see_a_cycle_and_an_upward_import() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    graph = {"leveret.model.queue": {"leveret.server.server", "leveret.errors"}}
    assert upward_imports(graph) == ["leveret.model.queue -> leveret.server.server"]
