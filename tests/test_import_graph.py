"""The package's import graph: no cycle, no private name or private module imported from another package,
and the packages import one way (the order is written down below, before its tests).

How imports are counted (read with ``ast`` from the source files, nothing is imported):

* every ``import`` and ``from ... import`` statement anywhere in a module counts: at module level,
  inside functions and methods, under ``if TYPE_CHECKING:``, in ``try``/``except`` - a type-only
  import is a cycle the day someone needs the name at run time, and an import inside a function
  cycles at run time (it only hides the cycle from the first import);
* an edge goes to the module that is named: ``from .x import y`` is an edge to ``x``, or to
  ``x.y`` when ``y`` is itself a module (``from . import _stored`` is an edge to ``_stored``, not
  to the package); ``from .context import ContextManager`` is an edge to ``context/__init__.py``;
* the parent packages that Python runs first are *not* edges (``from .context.items import X``
  is not an edge to ``context/__init__.py``): counting them would put every package's
  ``__init__`` in a cycle with each module it re-exports, which is how facades work;
* only modules of ``harness_lab`` are nodes; ``importlib.import_module`` with a string is not
  counted (the package uses it for optional third-party modules only).

A cycle is a strongly connected component of two or more modules (or a module importing itself).
A private name is ``_x`` (not a dunder) imported with ``from m import _x`` where ``m`` (or ``_x``
as a module) is in another package than the importing module; a module's package is the folder
it lives in. A private *module* is one whose file name starts with ``_`` (``__init__`` aside): another
module of its package may import it (``from ._sqlite_reads import name``), a module of another package
may not (not even a public name of it), as a private name.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "harness_lab"

@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    where: str  # path:line of the import statement
    names: tuple[str, ...]  # the names a ``from`` import takes (empty for ``import x``)


def _modules(root: Path) -> dict[str, Path]:
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _package(module: str, path: Path) -> str:
    """The package a module lives in: itself for a package's ``__init__``, else its parent."""
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def _edges(modules: dict[str, Path], root: Path) -> Iterator[Edge]:
    for module, path in modules.items():
        package = _package(module, path)
        rel = path.relative_to(root.parent)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            where = f"{rel}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in modules:
                        yield Edge(module, alias.name, where, ())
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[:len(base) - (node.level - 1)]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                if target not in modules:
                    continue
                plain = []
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    if sub in modules:  # ``from . import _stored``: the submodule itself
                        yield Edge(module, sub, where, ())
                    else:
                        plain.append(alias.name)
                if plain:
                    yield Edge(module, target, where, tuple(plain))


def _graph(root: Path = ROOT) -> tuple[dict[str, Path], list[Edge]]:
    modules = _modules(root)
    return modules, list(_edges(modules, root))


def _components(nodes: list[str], edges: list[Edge]) -> list[list[str]]:
    """Strongly connected components with a cycle (Tarjan's algorithm, iterative)."""
    succ: dict[str, list[str]] = {n: [] for n in nodes}
    for e in edges:
        succ[e.source].append(e.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(succ[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        top = stack.pop()
                        on_stack.discard(top)
                        component.append(top)
                        if top == node:
                            break
                    if len(component) > 1 or node in succ[node]:
                        found.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(succ[child])))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return sorted(found)


def _describe(component: list[str], edges: list[Edge]) -> str:
    """The component and the imports that tie it together, one per line."""
    inside = set(component)
    lines = [f"cycle of {len(component)}: {', '.join(component)}"]
    lines += sorted(f"    {e.where}: {e.source} -> {e.target}" for e in edges
                    if e.source in inside and e.target in inside)
    return "\n".join(lines)


def _cycles(root: Path = ROOT) -> tuple[list[list[str]], list[Edge]]:
    modules, edges = _graph(root)
    return _components(sorted(modules), edges), edges


def _package_made(tmp_path: Path, files: dict[str, str]) -> Path:
    """A package ``pkg`` of the given files (path -> text) under tmp_path."""
    pkg = tmp_path / "pkg"
    for path, text in files.items():
        (pkg / path).parent.mkdir(parents=True, exist_ok=True)
        (pkg / path).write_text(text, encoding="utf-8")
    return pkg


def test_the_reader_counts_every_kind_of_import(tmp_path: Path) -> None:
    """On a package made here: a cycle closed only by a function-level and a TYPE_CHECKING import is
    found, and so is a private name taken from another package (else the checks below prove nothing)."""
    pkg = _package_made(tmp_path, {
        "__init__.py": "",
        "a.py": "from .b import B\n",  # module level
        "b.py": "B = 1\n\ndef f():\n    from . import c  # inside a function\n    return c\n",
        "c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import A\n",
        "d.py": "from .sub.e import _hidden, shown\nfrom ._e2 import _fine  # same package\n",
        "_e2.py": "_fine = 1\n",
        "f.py": "from .sub._g import public\n\ndef f():\n    from .sub import _g\n    return _g\n",
        "sub/__init__.py": "",
        "sub/e.py": "_hidden = shown = 1\n",
        "sub/_g.py": "public = 1\n",
        "sub/h.py": "from ._g import public  # same package\n",
    })
    cycles, _ = _cycles(pkg)
    assert cycles == [["pkg.a", "pkg.b", "pkg.c"]]
    assert _private_imports(pkg) == ["pkg/d.py:1: pkg.d imports _hidden from pkg.sub.e"]
    assert _private_modules(pkg) == ["pkg/f.py:1: pkg.f imports pkg.sub._g", "pkg/f.py:4: pkg.f imports pkg.sub._g"]


def test_no_import_cycle() -> None:
    """No cycle at all, counting type-only and function-level imports: the persistence side types the
    run it works on against protocols (harness_lab.loop.run_like) and is given the class to make."""
    cycles, edges = _cycles()
    assert cycles == [], "\n" + "\n".join(_describe(c, edges) for c in cycles)


def _private_imports(root: Path = ROOT) -> list[str]:
    modules, edges = _graph(root)
    bad = []
    for e in edges:
        importer = _package(e.source, modules[e.source])
        for name in e.names:
            if name.startswith("_") and not name.startswith("__") and _package(e.target, modules[e.target]) != importer:
                bad.append(f"{e.where}: {e.source} imports {name} from {e.target}")
    return sorted(bad)


def test_no_private_name_imported_from_another_package() -> None:
    assert _private_imports() == []


def _private_modules(root: Path = ROOT) -> list[str]:
    modules, edges = _graph(root)
    bad = []
    for e in edges:
        name = e.target.rpartition(".")[2]
        private = name.startswith("_") and not name.startswith("__")
        if private and _package(e.target, modules[e.target]) != _package(e.source, modules[e.source]):
            bad.append(f"{e.where}: {e.source} imports {e.target}")
    return sorted(set(bad))


def test_no_private_module_imported_from_another_package() -> None:
    """A private module is its package's business: what another package needs of it is made public (the
    module renamed, or the function moved to where both can use it)."""
    assert _private_modules() == []


# -- the package order ----------------------------------------------------------------------------------
# Issue 20: arrows one way. A part (a subpackage, or a module at the package root) sits in one unit; units
# are layered, first to last, and a unit may import only units of later layers: {cli, experiments} ->
# persistence -> loop -> {faults, proposers, validation, context, sandbox} -> inputs -> records -> base.
# store/ and timeline/ are persistence-side (they may import loop/, never the reverse), as persistence/ is
# (which holds the checkpoint modules, once at the root). The contract sits above records/: it
# checks its gate and secret categories against records' vocabulary, and records/ never reads a contract.
# Units of one layer may import each other, but not in a circle.
UNITS = {
    "harness_lab": "facade",
    **dict.fromkeys(("cli", "experiments"), "commands"),
    **dict.fromkeys(("persistence", "store", "timeline"), "persistence"),
    "loop": "loop",
    **{part: part for part in ("faults", "proposers", "validation", "context", "sandbox")},
    **dict.fromkeys(("contract", "contract_fields", "scenarios", "evidence"), "inputs"),
    "records": "records",
    **dict.fromkeys(("errors", "clock", "paths", "_files", "process_id"), "base"),
}
LAYERS = (("facade",), ("commands",), ("persistence",), ("loop",),
          ("faults", "proposers", "validation", "context", "sandbox"), ("inputs",), ("records",), ("base",))
# What loop/ never imports (test_loop_imports_nothing_of_the_persistence_side).
PERSISTENCE_SIDE = frozenset(part for part, unit in UNITS.items() if unit == "persistence")


def _part(module: str) -> str:
    """The part a module belongs to: its subpackage, or itself for a module at the package root."""
    parts = module.split(".")
    return parts[0] if len(parts) == 1 else parts[1]


def _wrong_way(edges: list[Edge], units: dict[str, str], layers: tuple[tuple[str, ...], ...]) -> list[str]:
    """Each import against the order, and each circle between units of one layer."""
    rank = {unit: i for i, layer in enumerate(layers) for unit in layer}
    bad, between = [], []
    for e in edges:
        a, b = _part(e.source), _part(e.target)
        ua, ub = units[a], units[b]
        if ua == ub:
            continue
        if rank[ub] < rank[ua]:
            bad.append(f"{e.where}: {e.source} -> {e.target} ({ua} may not import {ub})")
        elif rank[ub] == rank[ua]:
            between.append(Edge(ua, ub, e.where, ()))
    for circle in _components(sorted({u for e in between for u in (e.source, e.target)}), between):
        bad.append(_describe(circle, between).replace("cycle of", "circle of units of", 1))
    return sorted(bad)


def test_the_package_order_is_checked(tmp_path: Path) -> None:
    """On a package made here: an import up the order and a circle inside a layer are found, an import
    down the order is not (else the checks below prove nothing)."""
    pkg = _package_made(tmp_path, {
        "__init__.py": "from .top import T\n",
        "top.py": "from .low import L\nT = 1\n",
        "low.py": "L = 1\n\ndef f():\n    from .top import T  # up the order\n    return T\n",
        "side_a.py": "from .side_b import B\nfrom .low import L\nA = 1\n",
        "side_b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .side_a import A\nB = 1\n",
    })
    _, edges = _graph(pkg)
    units = {"pkg": "top", "top": "top", "side_a": "a", "side_b": "b", "low": "low"}
    layers = (("top",), ("a", "b"), ("low",))
    assert _wrong_way(edges, units, layers) == [
        "circle of units of 2: a, b\n    pkg/side_a.py:1: a -> b\n    pkg/side_b.py:3: b -> a",
        "pkg/low.py:4: pkg.low -> pkg.top (low may not import top)",
    ]


def test_every_part_has_a_place_in_the_package_order() -> None:
    modules, _ = _graph()
    assert sorted({_part(m) for m in modules} - UNITS.keys()) == []
    assert sorted(set(UNITS.values()) - {u for layer in LAYERS for u in layer}) == []


def test_the_packages_import_one_way() -> None:
    """No import against the order (loop's imports of the persistence side: the test below)."""
    _, edges = _graph()
    rest = [e for e in edges if not (_part(e.source) == "loop" and _part(e.target) in PERSISTENCE_SIDE)]
    assert _wrong_way(rest, UNITS, LAYERS) == []


def test_loop_imports_nothing_of_the_persistence_side() -> None:
    _, edges = _graph()
    assert sorted(f"{e.where}: {e.source} -> {e.target}" for e in edges
                  if _part(e.source) == "loop" and _part(e.target) in PERSISTENCE_SIDE) == []
