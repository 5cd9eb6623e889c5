"""`ha status` shows how long ago each member's session was last renewed, and when the
active's expires (#14), as the backend knows it: for the members of other processes too, so
that a stopped or dead active on another host is visible before its session expires.

Real processes: `ha run` supervisors and `ha status` commands, on sqlite and etcd (backends
whose drivers tell other sessions' leases; ZooKeeper cannot, and says n/a: the last test). The
active is stopped (SIGSTOP) on sqlite, whose renew interval can be short, so the test is quick;
etcd's estimate of a silent lease is checked at the driver (test_contract_leases.py). Times are
checked as relations to what the test did (a stopped active's "renewed ago" is at least the
time it has been stopped), never as upper bounds.
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
from tests.support.backends.etcd import EtcdBackend
from tests.support.cli import Supervisors, ha, popen_ha, sqlite_url, wait_until

# the active renews every half second and is stopped for longer, well within its session
OPTIONS = "session_timeout=8&renew_interval=0.5"
STOPPED = 1.5
# the expiry line of the active
EXPIRY = r"expires in (\d+\.\d)s unless renewed \(renewed (\d+\.\d)s ago, lease (\d+)s\)"


def _run(hosts: Supervisors, identity: str) -> None:
    sleeper = [sys.executable, "-c", "import time; time.sleep(600)"]
    argv = ["run", "/svc", "--id", identity, "--", *sleeper]
    log = hosts.directory / f"{identity}.log"
    hosts.procs[identity] = popen_ha(*argv, env=hosts.env, log=log)


def _active(hosts: Supervisors) -> dict[str, Any]:
    """`ha status --json` once a is active, with its lease as every reading shows it."""

    def check() -> dict[str, Any] | None:
        doc = hosts.status()
        states = [m["state"] for m in doc["members"]]
        return doc if doc["active"] == "a" and states == ["active"] else None

    doc: dict[str, Any] = wait_until(check, "a active")
    lease = doc["active_lease"]
    assert doc["leases_told"] and lease is not None
    assert lease["renewed_ago"] >= 0 and 0 < lease["expires_in"] <= lease["duration"]
    assert lease["renewed_ago"] + lease["expires_in"] == pytest.approx(lease["duration"])
    assert doc["contenders"][0]["lease"] == lease  # the same session: one reading
    assert doc["members"][0]["lease"] is not None
    return doc


def _renewed(text: str) -> float:
    """The seconds of the text output's member table's "renewed" column (one member)."""
    found = re.findall(r"running\s+(\d+\.\d)s ago", text)
    assert len(found) == 1, text
    return float(found[0])


def test_a_stopped_actives_lease_ages_in_status(tmp_path: Path) -> None:
    with Supervisors(tmp_path, f"{sqlite_url(tmp_path)}?{OPTIONS}") as hosts:
        _run(hosts, "a")
        doc = _active(hosts)
        listing = ha("status", "/", env=hosts.env)  # ha status PREFIX: on the active's line
        assert listing.returncode == 0, listing.stderr
        assert re.search(
            r"/svc  active a  epoch \d+  renewed [\d.]+s ago, expires in", listing.stdout
        )

        proc = hosts.procs["a"]
        proc.send_signal(signal.SIGSTOP)
        try:
            time.sleep(STOPPED)
            shown = ha("status", "/svc", env=hosts.env)  # one command: its session must live
        finally:
            proc.send_signal(signal.SIGCONT)
        # still the active (its session lives on), renewed no later than it was stopped
        assert shown.returncode == 0, shown.stderr + shown.stdout
        assert f"active  a  epoch {doc['epoch']}" in shown.stdout
        found = re.search(EXPIRY, shown.stdout)
        assert found is not None, shown.stdout
        expires, renewed_ago, duration = (float(x) for x in found.groups())
        assert renewed_ago >= STOPPED and expires <= duration - STOPPED
        assert _renewed(shown.stdout) >= STOPPED  # the member table; its process: running
        assert f"renewed {renewed_ago}s ago" in shown.stdout.split("member")[0]  # the queue's

        # resumed, it renews again: the backend's reading, not the time since it joined
        def renewed() -> bool:
            lease = hosts.status()["active_lease"]
            return lease is not None and lease["renewed_ago"] < STOPPED

        wait_until(renewed, "a renewal")


def test_status_shows_leases_on_etcd(etcd_backend: EtcdBackend, tmp_path: Path) -> None:
    with Supervisors(tmp_path, f"{etcd_backend.url()}?session_timeout=3") as hosts:
        _run(hosts, "a")
        doc = _active(hosts)
        assert doc["active_lease"]["duration"] == 3  # etcd's granted TTL, whole seconds
        shown = ha("status", "/svc", env=hosts.env)
        assert shown.returncode == 0, shown.stderr
        found = re.search(EXPIRY, shown.stdout)
        assert found is not None and found.group(3) == "3", shown.stdout
        assert _renewed(shown.stdout) >= 0


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
