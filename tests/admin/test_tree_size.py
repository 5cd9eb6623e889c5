"""How full a backend's one object holding the tree is, before its limit is near: ``ha status``
and the metrics (asyncio and trio where in-process).

Only Kubernetes keeps a root in one object of limited size (a ConfigMap: 1 MiB, refused past
it with every write, the election's too); the other backends say nothing. The readings are
checked against the driver's own count of the ConfigMap (``Tree.size``, the count its writes
are refused by) and against a write that passes the limit.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from ha import admin
from ha.cli._show import TREE_WARNING, print_status, tree_line
from ha.drivers.base import TreeSize
from ha.drivers.kubernetes import tree as kube_tree
from ha.drivers.kubernetes.tree import TooLarge
from ha.metrics import BackendMetrics, Registry
from tests.support.cli import ha, ha_env
from tests.support.stores import ELECTION, win

pytestmark = pytest.mark.anyio


def samples(registry: Registry, name: str) -> dict[str, float]:
    """``{labels: value}`` of one metric in the exposition."""
    found = {}
    for line in registry.render().splitlines():
        if line.startswith(name + "{"):
            labels, value = line[len(name) :].rsplit(" ", 1)
            found[labels] = float(value)
    return found


async def test_status_and_metrics_show_the_configmap_against_its_limit(
    kubernetes_backend: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(kube_tree, "LIMIT", 16 * 1024)
    registry = Registry()
    async with kubernetes_backend.driver() as driver:
        BackendMetrics(registry).measure(driver)
        await win(driver)
        status = await admin.election_status(driver, ELECTION, tree_size=True)
        size = status.tree
        assert size is not None and size.limit == 16 * 1024
        assert 0 < size.used < size.limit * TREE_WARNING and size.nodes > 3
        assert "ConfigMap" in size.where and kubernetes_backend.namespace in size.where
        assert status.to_json()["tree"] == {
            "where": size.where,
            "bytes": size.used,
            "limit": size.limit,
            "nodes": size.nodes,
        }
        assert (await admin.election_status(driver, ELECTION)).tree is None  # not asked for
        print_status(status, "k8s://...")
        assert f"tree {size.used / 1024:.0f} KiB of 16 KiB" in capsys.readouterr().out

        # Near the limit: said in red, before any write is refused.
        await driver.create("/big", b"x" * (size.limit - size.used - 1500))
        nearly = await admin.election_status(driver, ELECTION, tree_size=True)
        assert nearly.tree is not None and nearly.tree.fraction >= TREE_WARNING
        print_status(nearly, "k8s://...")
        assert "tree nearly full" in capsys.readouterr().out
        # The metrics tell the same, as the driver's watch last saw the ConfigMap.
        with anyio.fail_after(10):
            while (driver.known_tree_size() or size).used != nearly.tree.used:
                await anyio.sleep(0.01)
        assert samples(registry, "ha_backend_tree_bytes") == {
            '{backend="kubernetes"}': nearly.tree.used
        }
        assert samples(registry, "ha_backend_tree_limit_bytes") == {
            '{backend="kubernetes"}': 16 * 1024
        }
        with pytest.raises(TooLarge):  # what the warning was for
            await driver.create("/more", b"x" * 2000)


async def test_backends_without_such_a_limit_show_none(sqlite_backend: Any) -> None:
    registry = Registry()
    async with sqlite_backend.driver() as driver:
        BackendMetrics(registry).measure(driver)
        await win(driver)
        status = await admin.election_status(driver, ELECTION, tree_size=True)
        assert status.tree is None and status.to_json()["tree"] is None
        assert driver.known_tree_size() is None
        assert samples(registry, "ha_backend_tree_bytes") == {}


def test_the_command_prints_the_size_and_its_json(kubernetes_backend: Any, tmp_path: Path) -> None:
    env = ha_env(tmp_path)
    url = kubernetes_backend.url()
    made = ha("--url", url, "format", "/svc", env=env)
    assert made.returncode == 0, made.stderr
    text = ha("--url", url, "status", "/svc", env=env)  # no active: exit code 3
    assert text.returncode == 3 and "KiB of 1024 KiB (0%)" in text.stdout, text.stderr
    doc = json.loads(ha("--url", url, "status", "/svc", "--json", env=env).stdout)
    assert doc["tree"]["limit"] == 1024 * 1024 and 0 < doc["tree"]["bytes"] < doc["tree"]["limit"]


def test_the_warning_line_says_what_the_limit_does() -> None:
    calm = TreeSize(100 * 1024, 1024 * 1024, 40, "ConfigMap ns/ha-ha")
    assert tree_line(calm) == "tree 100 KiB of 1024 KiB (10%), 40 nodes (ConfigMap ns/ha-ha)"
    full = TreeSize(900 * 1024, 1024 * 1024, 4000, "ConfigMap ns/ha-ha")
    assert tree_line(full, markup=False) == (
        "tree nearly full: 900 KiB of 1024 KiB (88%), 4000 nodes (ConfigMap ns/ha-ha);"
        " a write past the limit is refused"
    )
