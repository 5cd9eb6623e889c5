"""An unresolvable ZooKeeper host fails on DNS at once (issue 14), not after the connect
timeout: one line naming the host. A URL with one host that resolves goes on to connect."""

from __future__ import annotations

from pathlib import Path

import pytest

from ha.cli._dns import check_hosts_resolve
from ha.errors import ConfigurationError
from tests.support.cli import ha, ha_env, one_error_line


def test_an_unresolvable_host_is_one_line_before_the_connect_timeout(tmp_path: Path) -> None:
    env = ha_env(tmp_path)
    url = "zk://no-such-host.invalid:2181/ha?connect_timeout=120"
    # the bound only turns a wait for the 120 s connect timeout into a failure
    result = ha("status", "/a", "--url", url, env=env, timeout=60)
    assert one_error_line(result) == (
        "ha: error: cannot resolve the ZooKeeper host no-such-host.invalid"
        " (Name or service not known): check the URL"
    )


@pytest.mark.anyio
async def test_one_host_that_resolves_is_enough() -> None:
    await check_hosts_resolve("zk://a.invalid:2181,127.0.0.1:2181/ha")
    await check_hosts_resolve("sqlite:///nowhere.invalid/ha.db")  # not ZooKeeper: not looked up
    with pytest.raises(ConfigurationError, match=r"hosts a\.invalid \(.*\), b\.invalid \("):
        await check_hosts_resolve("zk://a.invalid,b.invalid:2182")
