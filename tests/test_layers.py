"""The packages of ``ha`` in layers, declared once, and a test that keeps them.

As trio's ``design.rst`` says of its core ("a very strict internal layering ... there's a test
to enforce this"): a module imports from its own package and from the layers below it, never
from a layer above, nor from another package of its own layer. Imports are read from the
source, wherever they stand (a function's lazy import counts: it runs when called); one under
``if TYPE_CHECKING:`` does not run and is not counted. Modules do not import each other in a
circle either, inside a package or across.

``ha.drivers`` and ``ha.pipeline`` are one layer each, whole: how their insides stack is theirs.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.imports import imported_modules, modules_under

HA = Path(__file__).parents[1] / "ha"

# bottom first; a package may import from the layers before its own
LAYERS: tuple[tuple[str, ...], ...] = (
    ("ha.errors",),  # the one error tree
    (
        "ha._background",
        "ha._clock",
        "ha._fs",
        "ha._guard",
        "ha._install",
        "ha._lazy",
        "ha._process",
    ),
    ("ha.drivers",),  # the contract (base.py) and one package per backend
    ("ha.election",),  # the pure machine, its names, its runner
    ("ha.membership",),  # what a member publishes and honours (ha run, the services)
    ("ha.admin", "ha.metrics", "ha.stores", "ha.testing"),
    ("ha.http",),
    ("ha.demo", "ha.services", "ha.supervisor"),
    ("ha.pipeline",),
    ("ha.report",),
    ("ha", "ha.cli"),  # the public names (ha/__init__.py), the command
    ("ha.__main__",),
)

LAYER = {package: level for level, packages in enumerate(LAYERS) for package in packages}


MODULES = modules_under(HA)


def package_of(module: str) -> str:
    """The declared package a module belongs to: ``ha.x`` for anything under ``ha/x``."""
    return ".".join(module.split(".")[:2])


def _type_checking(node: ast.AST) -> bool:
    if not isinstance(node, ast.If):
        return False
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_nodes(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement that can run (those under ``if TYPE_CHECKING:`` are left out)."""
    if isinstance(node, ast.Import | ast.ImportFrom):
        yield node
        return
    children = node.orelse if isinstance(node, ast.If) and _type_checking(node) else None
    for child in ast.iter_child_nodes(node) if children is None else children:
        yield from _import_nodes(child)


def imports(module: str, source: str | None = None) -> Iterator[tuple[int, str]]:
    """(line, module of ``ha`` imported) for each import that ``module`` can run."""
    path = MODULES[module]
    tree = ast.parse(path.read_text() if source is None else source, str(path))
    return imported_modules(_import_nodes(tree), module, MODULES)


def wrong_way(module: str, source: str | None = None) -> list[str]:
    """The imports of ``module`` that run up, or sideways to another package of its layer."""
    mine = package_of(module)
    return [
        f"{MODULES[module].relative_to(HA.parent)}:{line} imports {target}"
        f" ({package_of(target)}, layer {LAYER[package_of(target)]}; {mine} is {LAYER[mine]})"
        for line, target in imports(module, source)
        if package_of(target) != mine and LAYER[package_of(target)] >= LAYER[mine]
    ]


GRAPH = {module: sorted({target for _, target in imports(module)}) for module in MODULES}


def test_every_package_has_its_layer() -> None:
    packages = {package_of(module) for module in MODULES}
    assert packages - LAYER.keys() == set(), "declare each new package in LAYERS"
    assert LAYER.keys() - packages == set(), "a package of LAYERS is gone: take it out"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_import_runs_up_or_sideways(module: str) -> None:
    assert wrong_way(module) == []


def test_no_modules_import_each_other_in_a_circle() -> None:
    """Tarjan's strongly connected components of the module graph: each must be one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in GRAPH[module]:
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == module:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for module in GRAPH:
        if module not in index:
            visit(module)
    assert circles == []


def test_an_import_that_runs_up_is_seen_and_a_type_only_one_is_not() -> None:
    source = """
from typing import TYPE_CHECKING
from ..election.nodes import ElectionNodes
from ..supervisor import Supervisor
if TYPE_CHECKING:
    from ..cli import main
else:
    from .. import admin
def later():
    from ..services import HAServices
"""
    assert list(imports("ha.membership.follow", source)) == [
        (3, "ha.election.nodes"),
        (4, "ha.supervisor"),
        (8, "ha.admin"),
        (10, "ha.services"),
    ]
    assert [line.split(" (")[0] for line in wrong_way("ha.membership.follow", source)] == [
        "ha/membership/follow.py:4 imports ha.supervisor",
        "ha/membership/follow.py:8 imports ha.admin",
        "ha/membership/follow.py:10 imports ha.services",
    ]


def test_docs_layout_names_every_package_there_is() -> None:
    """docs/layout.md draws both trees: each package of ``LAYERS`` and each folder of tests/
    has its line there, and it names no folder that is gone."""
    text = (HA.parent / "docs" / "layout.md").read_text()
    named = {
        f"`ha/{package.removeprefix('ha.').replace('.', '/')}/`"
        if (HA.parent / package.replace(".", "/")).is_dir() and package != "ha"
        else f"{package.rpartition('.')[2]}.py"
        if package != "ha"
        else "`ha/__init__.py`"
        for package in LAYER
    }
    tests = HA.parent / "tests"
    named |= {f"`tests/{d.name}/`" for d in tests.iterdir() if (d / "__init__.py").is_file()}
    assert {name for name in named if name not in text} == set()
    drawn = set(re.findall(r"`((?:ha|tests)/[\w/]+)/`", text))
    assert {path for path in drawn if not (HA.parent / path).is_dir()} == set()
