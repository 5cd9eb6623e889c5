"""`ha status` shows how long ago each member's session was last renewed, and when the
active's expires (#14), as the backend knows it: for the members of other processes too, so
that a stopped or dead active on another host is visible before its session expires.

Real processes: `ha run` supervisors and `ha status` commands, on sqlite and etcd (the backends
whose drivers tell other sessions' leases; ZooKeeper cannot, and says n/a: the last test).
Times are checked as relations to what the test did (a stopped active's "renewed ago" is at
least the time it has been stopped), never as upper bounds.
"""

from __future__ import annotations

import re
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from ha import admin
from ha.cli._show import print_status
from tests.cli.helpers import Supervisors, ha, popen_ha, sqlite_url, wait_until
from tests.support.backends.etcd import EtcdBackend

# per backend: the supervisors' options, and how long the active is stopped: longer than its
# renew interval (sqlite: as set; etcd: a third of the session), well within its session
SETTINGS = {
    "sqlite": ("session_timeout=8&renew_interval=0.5", 1.5),
    "etcd": ("session_timeout=12", 4.2),
}


def _run(hosts: Supervisors, identity: str) -> None:
    argv = [
        "run",
        "/svc",
        "--id",
        identity,
        "--",
        sys.executable,
        "-c",
        "import time; time.sleep(600)",
    ]
    log = hosts.directory / f"{identity}.log"
    hosts.procs[identity] = popen_ha(*argv, env=hosts.env, log=log)


def _active(hosts: Supervisors) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        doc = hosts.status()
        states = [m["state"] for m in doc["members"]]
        return doc if doc["active"] == "a" and states == ["active"] else None

    found: dict[str, Any] = wait_until(check, "a active")
    return found


def _renewed(text: str) -> float:
    """The seconds of the text output's member table's "renewed" column (one member)."""
    found = re.findall(r"running\s+(\d+\.\d)s ago", text)
    assert len(found) == 1, text
    return float(found[0])


@pytest.mark.parametrize("backend", ["sqlite", "etcd"])
def test_a_stopped_actives_lease_ages_in_status(
    tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    if backend == "etcd":
        url = request.getfixturevalue("etcd_backend").url()
    else:
        url = sqlite_url(tmp_path)
    options, stopped_for = SETTINGS[backend]
    with Supervisors(tmp_path, f"{url}?{options}") as hosts:
        _run(hosts, "a")
        doc = _active(hosts)
        lease = doc["active_lease"]
        assert doc["leases_told"] and lease is not None
        assert lease["duration"] > stopped_for and lease["expires_in"] > 0
        assert lease["renewed_ago"] + lease["expires_in"] == pytest.approx(lease["duration"])
        assert doc["contenders"][0]["lease"] == lease  # the same session: one reading
        assert doc["members"][0]["lease"] is not None
        if backend == "sqlite":  # ha status PREFIX: the active's lease on its line
            listing = ha("status", "/", env=hosts.env)
            assert listing.returncode == 0, listing.stderr
            found = r"/svc  active a  epoch \d+  renewed [\d.]+s ago, expires in"
            assert re.search(found, listing.stdout)

        proc = hosts.procs["a"]
        proc.send_signal(signal.SIGSTOP)
        try:
            time.sleep(stopped_for)
            shown = ha("status", "/svc", env=hosts.env)  # one command: its session must live
        finally:
            proc.send_signal(signal.SIGCONT)
        # still the active (its session lives on), renewed no later than it was stopped
        assert shown.returncode == 0, shown.stderr + shown.stdout
        assert f"active  a  epoch {doc['epoch']}" in shown.stdout
        line = r"expires in (\d+\.\d)s unless renewed \(renewed (\d+\.\d)s ago, lease (\d+)s\)"
        found = re.search(line, shown.stdout)
        assert found is not None, shown.stdout
        expires, renewed_ago, duration = (float(x) for x in found.groups())
        assert renewed_ago >= stopped_for and expires <= duration - stopped_for
        assert _renewed(shown.stdout) >= stopped_for  # the member table; its process: running
        assert f"renewed {renewed_ago}s ago" in shown.stdout.split("member")[0]  # the queue's

        # resumed, it renews again: the reading is the backend's, not the time since it joined
        def renewed() -> bool:
            lease = hosts.status()["active_lease"]
            return lease is not None and lease["renewed_ago"] < stopped_for

        wait_until(renewed, "a renewal")


def test_a_backend_that_cannot_tell_says_n_a(capsys: pytest.CaptureFixture[str]) -> None:
    # what ZooKeeper's status shows (its driver answers no lease: test_contract_leases.py)
    contender = admin.Contender("a_x_0000000001", "a_x", b"a", 1, 0x1234, time.time())
    member = admin.Member(b"a", "active", 1, "elsewhere", 42, time.time())
    status = admin.ElectionStatus(
        "/svc", True, b"a", 0x1234, b"a", 1, time.time(), contenders=(contender,),
        members=(member,),
    )  # fmt: skip
    print_status(status, "zk://x/ha")
    out = capsys.readouterr().out
    assert "expires in n/a (the backend tells no other session's last renewal" in out
    assert re.search(r"elsewhere\s+42\s+n/a\s+n/a", out)  # process and renewed: not known
    assert "renewed" not in out.split("member")[0]  # no "renewed" on the queue's lines


__all__ = ("EtcdBackend",)
