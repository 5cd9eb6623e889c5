"""`ha run --hold-on-disconnect S` through the real command on ZooKeeper: a blip of the
connection shorter than the hold (and the session) leaves COMMAND running, in the same term;
without a hold the same blip stops it. A hold the session cannot cover is one error line.

The blip is a fault proxy between the supervisor and the server: its port refuses and drops
connections, as a server that went away, until it accepts again.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.backends.zookeeper import ZooKeeperBackend
from tests.support.cli import Hosts, alive, ha, ha_env, one_error_line, sqlite_url, wait_until
from tests.support.faultproxy import FaultProxy

LOST = "lost contact with the backend"


@pytest.mark.zookeeper
@pytest.mark.parametrize(
    "hold", ["2.5", pytest.param("0", marks=pytest.mark.slow)]
)  # slow: the contrast, a blip that stops COMMAND without a hold
def test_a_blip_shorter_than_the_hold_leaves_command_running(
    zookeeper_backend: ZooKeeperBackend, tmp_path: Path, hold: str
) -> None:
    host, port = zookeeper_backend.server.hosts.rsplit(":", 1)
    with FaultProxy() as proxy:
        link = proxy.link((host, int(port)))
        url = f"zk://{link.hosts}{zookeeper_backend.chroot}?session_timeout=4"
        with Hosts(tmp_path, url) as hosts:
            hosts.start("a", "--hold-on-disconnect", hold)
            doc = hosts.settled()
            before = hosts.child("a")
            assert before is not None and before[1] == doc["epoch"]
            link.refuse()  # the server is gone for a
            wait_until(lambda: LOST in hosts.log("a"), "a to notice")
            link.accept()
            after = wait_until(
                lambda: (d := hosts.status())["active"] == "a" and hosts.child("a") and d,
                "a to lead with contact back",
            )
            if hold == "0":  # stopped at once (started again once contact was back)
                assert hosts.child("a") != before and not alive(before[0])
                return
            assert after["epoch"] == doc["epoch"]  # the same term
            assert hosts.child("a") == before and alive(before[0])  # never stopped
            assert ") stopped" not in hosts.log("a")
    assert f"{LOST}: holding COMMAND up to 2.5s after the last contact" in hosts.log("a")


def test_a_hold_longer_than_the_session_allows_is_one_line(tmp_path: Path) -> None:
    env = ha_env(tmp_path, HA_URL=sqlite_url(tmp_path) + "?session_timeout=4")
    result = ha("run", "/svc", "--id", "a", "--hold-on-disconnect", "4", "--", "true", env=env)
    assert one_error_line(result) == (
        "ha: error: --hold-on-disconnect 4s: with a session timeout of 4s and --grace 0.5s it"
        " must be 0 (stop at once) or from 2s to 2.66s (COMMAND must be stopped, --grace"
        " included, before the session can expire): raise session_timeout in the backend URL"
        " to hold longer"
    )
