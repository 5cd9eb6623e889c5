"""The network of the peer-behaviour tests: memory, sqlite and ZooKeeper peers of one election."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.harness import (
    MemoryNet,
    Net,
    SqliteNet,
)


@pytest.fixture(params=["memory", "sqlite", pytest.param("zookeeper", marks=pytest.mark.zookeeper)])
def peer_net(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Net]:
    made: Net
    if request.param == "zookeeper":
        from tests.support.backends.zookeeper import ZooKeeperNet

        made = ZooKeeperNet(request.getfixturevalue("zookeeper_server"))
    else:
        made = MemoryNet() if request.param == "memory" else SqliteNet(tmp_path)
    yield made
    made.close()
