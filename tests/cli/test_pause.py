"""`ha pause`, `ha resume`, `ha history` and `ha status` (one election, and every election under
a prefix), as real processes on sqlite and ZooKeeper.

While paused, the active's supervisor is killed: its standby becomes first in the queue but
neither fences nor acts; its fence command (which says whether it ran before or after the
resume) proves it. After `ha resume` it fences the dead active and takes over, and the history
lists both terms.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest

from tests.support.backends.zookeeper import ZooKeeperBackend, zookeeper_backend, zookeeper_server
from tests.support.cli import Hosts, ha, one_error_line, wait_until

__all__ = ("zookeeper_backend", "zookeeper_server")  # fixtures, until the plugin is registered


def _url(request: pytest.FixtureRequest, backend: str) -> str | None:
    if backend == "sqlite":
        return None
    zk: ZooKeeperBackend = request.getfixturevalue("zookeeper_backend")
    return zk.url() + "?session_timeout=2"


# ZooKeeper's run is slow-marked (the suite's time budget); tests/election/test_pause.py runs the
# pause on ZooKeeper in every run, through the library
@pytest.mark.parametrize(
    "backend",
    ["sqlite", pytest.param("zookeeper", marks=[pytest.mark.zookeeper, pytest.mark.slow])],
)
def test_pause_stops_failover_until_resume(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    marker, fenced = tmp_path / "resumed", tmp_path / "fenced"
    # the fence says whether it ran before `ha resume` (never, while paused) or after
    fence = f"test -e {marker} && echo after >> {fenced} || echo before >> {fenced}"
    with Hosts(tmp_path, _url(request, backend)) as hosts:
        hosts.start("a")
        hosts.settled()
        hosts.start("b", "--fence", shlex.join(["sh", "-c", fence]))
        epoch_a = hosts.settled()["epoch"]

        paused = ha("pause", "/svc", env=hosts.env)
        assert paused.returncode == 0, paused.stderr
        assert "paused: no failover until `ha resume /svc`" in paused.stdout
        assert "'a' stays active" in paused.stdout
        again = ha("pause", "/svc", env=hosts.env)
        assert "paused already" in again.stdout
        doc = hosts.status()
        assert doc["paused"]["active"] == "a" and doc["paused"]["epoch"] == epoch_a
        assert doc["active"] == "a"  # the active keeps leading
        refused = ha("failover", "/svc", env=hosts.env)
        assert "/svc is paused: `ha resume /svc` first" in one_error_line(refused)

        hosts.procs["a"].kill()  # its session ends during the pause: nobody leads

        def waiting() -> dict[str, Any] | None:
            found = hosts.status()
            return found if found["holder"] == "b" and not found["leftovers"] == [] else None

        doc = wait_until(waiting, "b first in the queue, a's breadcrumb left")
        assert doc["active"] is None and doc["leftovers"][0]["breadcrumb"]["identity"] == "a"
        shown = ha("status", "/svc", env=hosts.env)
        assert shown.returncode == 3  # no active
        assert "b is first" in shown.stdout and "waits for `ha resume`" in shown.stdout
        assert hosts.child("b") is None
        # b's own log says it (#30): its public state (standby) does not change
        said = "/svc: first in the queue while the election is paused: the active we stood by"
        wait_until(lambda: said in hosts.log("b"), "b's warning")

        marker.touch()
        resumed = ha("resume", "/svc", env=hosts.env)
        assert resumed.returncode == 0 and "resumed" in resumed.stdout
        doc = hosts.settled()
        assert doc["active"] == "b" and doc["paused"] is None
        # fenced after the resume only (again if a loaded machine made it rejoin on the way)
        assert set(fenced.read_text().split()) == {"after"}

        def terms() -> list[Any] | None:
            got = json.loads(ha("history", "/svc", "--json", env=hosts.env).stdout)["terms"]
            return got if len(got) == 2 else None

        first, second = wait_until(terms, "both terms in the history")
        assert (first["identity"], first["epoch"]) == ("a", epoch_a)
        assert (second["identity"], second["epoch"]) == ("b", doc["epoch"])
        text = ha("history", "/svc", env=hosts.env).stdout.splitlines()
        assert [line.split()[4:6] for line in text] == [["a", "first"], ["b", "won"]]
        assert "(fenced 'a')" in text[1]  # it took over from a crash
        # a's term ended when b took over, by a lost session; b's is open (#30)
        assert (first["ended"], second["ended"]) == (second["started"], None)
        assert first["end_cause"] == "lost its session: b took over and fenced it"
        assert "ended after " in text[0] and text[0].endswith(first["end_cause"])

        # every election under a prefix, one line each
        for other in ("/grp/x", "/grp/y"):
            assert ha("format", other, env=hosts.env).returncode == 0
        listed = ha("status", "/grp", env=hosts.env)
        assert listed.returncode == 3  # none of them has an active
        assert listed.stdout.splitlines() == [
            "/grp/x  no active  0 standbys",
            "/grp/y  no active  0 standbys",
        ]
        everything = json.loads(ha("status", "/", "--json", env=hosts.env).stdout)
        assert [(e["path"], e["active"]) for e in everything] == [
            ("/grp/x", None),
            ("/grp/y", None),
            ("/svc", "b"),
        ]


def test_pause_errors_are_one_line(tmp_path: Path) -> None:
    with Hosts(tmp_path) as hosts:
        assert ha("format", "/svc", env=hosts.env).returncode == 0
        missing = ha("pause", "/nothing", env=hosts.env)
        assert "no election at /nothing" in one_error_line(missing)
        history = ha("history", "/nothing", env=hosts.env)
        assert "no election at /nothing" in one_error_line(history)
        assert "no leader recorded yet" in ha("history", "/svc", env=hosts.env).stdout
        assert ha("resume", "/svc", env=hosts.env).stdout.strip() == "/svc: not paused"


@pytest.mark.slow  # recorded and read in tests/election/test_pause.py in every run
def test_status_shows_the_last_refused_fence(tmp_path: Path) -> None:
    with Hosts(tmp_path) as hosts:
        hosts.start("a")
        hosts.settled()
        hosts.start("b", "--fence", "false")
        hosts.settled()
        hosts.procs["a"].kill()

        def refused() -> dict[str, Any] | None:
            failure: dict[str, Any] | None = hosts.status()["fence_failure"]
            return failure

        failure = wait_until(refused, "the refused fence in the election's history")
        assert failure["by"] == "b" and failure["old"] == "a" and failure["count"] >= 1
        shown = ha("status", "/svc", env=hosts.env).stdout
        assert "last refused fence: b could not fence a" in shown
