"""Each driver is made of parts it owns, and no part reads a sibling's private attributes.

Counted by name, from the source: a private attribute (``_x``, methods too) used in one file of
a driver's package but made in another (assigned in its ``__init__``, or a class member), the
drivers' shared modules (``ha/drivers/_*.py``, ``base.py``) counting as siblings, except that
the facade (``driver.py``, the one subclass of ``Driver``) owns what it inherits from
``base.py`` and ``_parts.py``. Such a name is a class chain sharing one ``self`` across files, or a part
reaching into another's state. ``python tests/drivers/test_parts.py`` prints the figures.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from ha.drivers.base import NodeEvent
from ha.metrics.backend import tap_node_events

DRIVERS = Path(__file__).resolve().parents[2] / "ha" / "drivers"
FACADE_BASES = ("base.py", "_parts.py")  # Driver, PartsDriver: the facade's own


def _made_and_used(path: Path) -> tuple[set[str], set[str]]:
    """The private names ``path`` makes (members, ``self._x =`` in ``__init__``) and the
    private attributes it uses elsewhere."""
    tree = ast.parse(path.read_text())
    made: set[str] = set()
    in_init: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                    made.add(item.name)
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    made.add(item.target.id)
                elif isinstance(item, ast.Assign):
                    made.update(t.id for t in item.targets if isinstance(t, ast.Name))
        if isinstance(node, ast.FunctionDef) and node.name == "__init__":
            for sub in ast.walk(node):
                if (
                    isinstance(sub, ast.Attribute)
                    and isinstance(sub.ctx, ast.Store)
                    and isinstance(sub.value, ast.Name)
                    and sub.value.id == "self"
                ):
                    in_init.add(id(sub))
                    made.add(sub.attr)
    used = {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and node.attr.startswith("_")
        and not node.attr.startswith("__")
        and id(node) not in in_init
    }
    return made, used


def shared_privates(package: Path) -> dict[str, set[str]]:
    """Private name -> the files of ``package`` that use it, made in a sibling file."""
    files = sorted(package.glob("*.py")) + sorted(package.parent.glob("*.py"))
    found = {path: _made_and_used(path) for path in files}
    shared: dict[str, set[str]] = {}
    for path, (made, used) in found.items():
        if path.parent != package:
            continue
        for name in used - made:
            owners = [
                other
                for other, (other_made, _) in found.items()
                if other != path
                and name in other_made
                and not (other.name in FACADE_BASES and path.name == "driver.py")
            ]
            if owners:
                shared.setdefault(name, set()).add(path.name)
    return shared


PACKAGES = sorted(p.name for p in DRIVERS.iterdir() if (p / "__init__.py").exists())


@pytest.mark.parametrize("package", PACKAGES)
def test_no_part_reads_a_siblings_private_attributes(package: str) -> None:
    assert shared_privates(DRIVERS / package) == {}


if __name__ == "__main__":
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else DRIVERS
    for name in sorted(p.name for p in root.iterdir() if (p / "__init__.py").exists()):
        shared = shared_privates(root / name)
        print(f"{name:12} {len(shared)}")
        for attr, users in sorted(shared.items()):
            print(f"    {attr}: {', '.join(sorted(users))}")


@pytest.mark.anyio
async def test_the_parts_send_their_events_through_the_drivers_emit(backend: Any) -> None:
    """``ha.metrics`` taps a driver's node events by wrapping ``_emit`` on the instance
    (``tap_node_events``): the parts that watch must send theirs through it, looked up at
    each event, not through the method they were handed when the driver was built."""
    tapped: list[NodeEvent] = []
    delivered: list[NodeEvent] = []
    async with backend.driver(session_timeout=1.0) as driver:
        tap_node_events(driver, "test", tapped.append)
        driver.subscribe("/tapped", delivered.append)
        await driver.create("/tapped")
        await driver.delete("/tapped")
        with anyio.fail_after(10):
            while len(delivered) < 2:
                await anyio.sleep(0.01)
        assert tapped == delivered
