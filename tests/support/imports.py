"""Imports read from source, for the tests that keep the layers (tests/test_layers.py) and the
helpers' home (tests/test_helpers_home.py): which module of a tree each import names."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from pathlib import Path


def modules_under(package: Path) -> dict[str, Path]:
    """The dotted name of every module of ``package`` (a directory), and its file."""

    def name(path: Path) -> str:
        parts = path.relative_to(package.parent).with_suffix("").parts
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

    return {name(path): path for path in sorted(package.rglob("*.py"))}


def imported_modules(
    nodes: Iterable[ast.AST], module: str, modules: dict[str, Path]
) -> Iterator[tuple[int, str]]:
    """(line, module of ``modules``) for each import among ``nodes`` of ``module``: relative
    imports resolved, ``from . import x`` taken as the module x if there is one, and a name
    inside a module taken as that module."""
    here = module if modules[module].name == "__init__.py" else module.rpartition(".")[0]
    for node in nodes:
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = here.split(".")[: len(here.split(".")) - (node.level - 1)]
                base = ".".join([*parent, *([node.module] if node.module else [])])
            targets = [
                f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names
            ]
        else:
            continue
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]  # a name inside a module
            if target and target != module:
                yield node.lineno, target
