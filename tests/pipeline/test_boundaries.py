"""The pipeline's inner boundaries, read from the source (#27): ``ha/http`` serves a job manager
through a protocol and imports nothing of ``ha.pipeline`` (no loop between the two); a run
sees its term only through ``TermContext`` (it imports neither the term nor the manager); the
term's rules are pure (no anyio, no driver)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import ha

ROOT = Path(ha.__file__).parent


def imported(path: Path) -> set[str]:
    """The modules ``path`` imports, absolute (relative imports resolved), lazy ones too."""
    package = ".".join(path.relative_to(ROOT.parent).with_suffix("").parts[:-1])
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - max(node.level - 1, 0)]
            module = ".".join([*base, node.module or ""]) if node.level else node.module or ""
            found.add(module.rstrip("."))
            found.update(f"{module.rstrip('.')}.{alias.name}" for alias in node.names)
    return found


def test_the_resolver_sees_relative_and_lazy_imports() -> None:
    assert "ha.pipeline.jobmanager.term" in imported(ROOT / "pipeline/jobmanager/manager.py")
    assert "ha.pipeline.api.registry" in imported(ROOT / "cli/jobs.py")  # inside a function


@pytest.mark.parametrize("path", sorted((ROOT / "http").glob("*.py")), ids=lambda p: p.name)
def test_http_imports_nothing_of_the_pipeline(path: Path) -> None:
    assert not {m for m in imported(path) if m.startswith("ha.pipeline")}


@pytest.mark.parametrize(
    "path", sorted((ROOT / "pipeline/jobmanager/runs").glob("*.py")), ids=lambda p: p.name
)
def test_a_run_sees_neither_its_term_nor_the_manager(path: Path) -> None:
    above = ("ha.pipeline.jobmanager.term", "ha.pipeline.jobmanager.manager")
    assert not {m for m in imported(path) if m.startswith(above)}


def test_the_rules_are_pure() -> None:
    modules = imported(ROOT / "pipeline/jobmanager/rules.py")
    assert not {m for m in modules if m.split(".")[0] in ("anyio", "trio", "asyncio", "time")}
    assert not {m for m in modules if m.startswith(("ha.drivers", "ha.election"))}
