"""`ha watch` through a backend outage (issue 14): a ZooKeeper server stopped and started again.

Watch says on stderr that it lost the backend, then that it is back, and goes on printing
leader changes (it used to exit with the first failed read).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.backends.zookeeper import ZooKeeperServer
from tests.support.cli import Hosts, ha, popen_ha, wait_until

LOST = "ha: warning: lost the backend ("
BACK = "ha: the backend is back: watching /svc again"


@pytest.mark.zookeeper
@pytest.mark.parametrize(
    "loop",
    ["asyncio", pytest.param("trio", marks=pytest.mark.slow)],  # slow: a second JVM restart
)
def test_watch_goes_on_after_the_zookeeper_server_restarts(
    zookeeper_server_factory: Callable[[], ZooKeeperServer], tmp_path: Path, loop: str
) -> None:
    server = zookeeper_server_factory()
    url = f"zk://{server.hosts}/ha?session_timeout=3"
    with Hosts(tmp_path, url, HA_ASYNC_BACKEND=loop) as hosts:
        assert ha("format", "/svc", env=hosts.env).returncode == 0
        log = tmp_path / "watch.log"
        watch = popen_ha("watch", "/svc", "--count", "2", env=hosts.env, log=log)
        hosts.procs["watch"] = watch  # stopped with the supervisors if the test fails

        def lines() -> list[str]:
            return log.read_text().splitlines()

        def has(text: str) -> Callable[[], Any]:
            return lambda: any(text in line for line in lines())

        wait_until(has("/svc no active"), "the first line")
        server.stop()
        wait_until(has(LOST), "watch to say it lost the backend")
        assert watch.poll() is None  # it waits for the backend instead of exiting
        server.start()
        server.wait_serving()
        wait_until(has(BACK), "watch to say the backend is back")
        hosts.start("a")
        assert watch.wait(timeout=60) == 0  # the second line: a leads
        out = lines()
        assert out[0].endswith(" /svc no active")
        assert out[1].startswith(LOST) and out[2] == BACK
        assert len(out) == 4 and " /svc active a epoch " in out[3], out
