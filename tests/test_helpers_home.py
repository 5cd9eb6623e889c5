"""Where a test's helpers live: in ``tests.support``, not in another test.

A test module (``test_*.py``) imports helpers from ``tests.support`` only, or, inside a
harness package (``tests.chaos``, ``tests.netns``: runners of their own, with ``python -m``
entry points), from that harness's own modules (and those of a harness it builds on). No module under ``tests/`` imports a
``test_*.py`` module or a ``conftest.py``: a helper another test needs moves to
``tests.support``, so that running, moving or deleting one test file never breaks another.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tests.support.imports import imported_modules, modules_under

TESTS = Path(__file__).parent

# packages under tests/ whose helper modules form a harness of their own (rounds run with
# ``python -m``), and the harnesses each builds on: the netns rounds are chaos rounds on hosts
HARNESSES: dict[str, tuple[str, ...]] = {"tests.chaos": (), "tests.netns": ("tests.chaos",)}


MODULES = modules_under(TESTS)


def imports(module: str, source: str | None = None) -> Iterator[tuple[int, str]]:
    """(line, module under tests/) for each import in ``module``, wherever it stands."""
    path = MODULES[module]
    tree = ast.parse(path.read_text() if source is None else source, str(path))
    return imported_modules(ast.walk(tree), module, MODULES)


def is_test(module: str) -> bool:
    last = module.rpartition(".")[2]
    return last.startswith("test_") or last == "conftest"


def reach(module: str) -> tuple[str, ...]:
    """The packages under tests/ whose helper modules ``module`` may import."""
    for harness, below in HARNESSES.items():
        if module == harness or module.startswith(harness + "."):
            return ("tests.support", harness, *below)
    return ("tests.support",)


def misplaced(module: str, source: str | None = None) -> list[str]:
    """The imports of ``module`` that reach into a test, or into helpers out of its reach."""
    return [
        f"{MODULES[module].relative_to(TESTS.parent)}:{line} imports {target}"
        for line, target in sorted(set(imports(module, source)))
        if is_test(target)
        or not any(target == home or target.startswith(home + ".") for home in reach(module))
    ]


def all_misplaced() -> list[str]:
    return [found for module in MODULES for found in misplaced(module)]


def test_helpers_come_from_tests_support() -> None:
    assert all_misplaced() == []


def test_an_import_of_another_test_or_its_helpers_is_seen() -> None:
    source = """
from tests.support.harness import Cluster
from tests.cli.test_run import main
from tests.chaos.procs import Round
from tests.netns.hosts import Host
from tests.chaos import test_containment
def later():
    from ..kubeapi.conftest import Fake
"""
    assert misplaced("tests.drivers.test_memory", source) == [
        "tests/drivers/test_memory.py:3 imports tests.cli.test_run",
        "tests/drivers/test_memory.py:4 imports tests.chaos.procs",
        "tests/drivers/test_memory.py:5 imports tests.netns.hosts",
        "tests/drivers/test_memory.py:6 imports tests.chaos.test_containment",
        "tests/drivers/test_memory.py:8 imports tests.kubeapi.conftest",
    ]
    # a harness's test imports its harness and the one it builds on; never another test
    assert misplaced("tests.netns.test_netns", source) == [
        "tests/netns/test_netns.py:3 imports tests.cli.test_run",
        "tests/netns/test_netns.py:6 imports tests.chaos.test_containment",
        "tests/netns/test_netns.py:8 imports tests.kubeapi.conftest",
    ]
    assert misplaced("tests.chaos.test_chaos", source)[1] == (
        "tests/chaos/test_chaos.py:5 imports tests.netns.hosts"
    )


if __name__ == "__main__":  # the count: python -m tests.test_helpers_home
    print(len(all_misplaced()))
