"""What a dashboard reads from `ha run --http`: two real supervisors on sqlite, their
/metrics scraped before and after a kill -9 of the active, and the Grafana dashboard in
deploy/grafana checked against what they export.

No leader's identity in a label (a pod's name is new on every restart: a new series per
leader); whether the election has an active, is paused, since when its leader leads; COMMAND
up, its starts and health checks; ``process_*`` and ``ha_build_info``; and the time the
election had no active, detection included (the takeover histogram leaves it out). And
`ha jobs manager --http` exports the same ``process_*`` and ``ha_build_info``.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ha._install import version
from ha.supervisor.exits import STARTED
from tests.support.cli import Supervisors, ha, popen_ha, wait_until
from tests.support.http import http_get

DASHBOARD = Path(__file__).parents[2] / "deploy" / "grafana" / "ha-elections.json"
IDENTITIES = ("host-a1", "host-b2")
SQLITE_DETECTION = 0.1  # SqliteDriver's default poll interval: it sees a dead process by then

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(port: int) -> tuple[Samples, str]:
    status, body = http_get(port, "/metrics")
    assert status == 200
    text = body.decode()
    found: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found, text


def one(samples: Samples, name: str, **labels: str) -> float:
    want = set(labels.items())
    [value] = [v for (n, found), v in samples.items() if n == name and want <= set(found)]
    return value


def maybe(samples: Samples, name: str, **labels: str) -> float | None:
    want = set(labels.items())
    found = [v for (n, got), v in samples.items() if n == name and want <= set(got)]
    return found[0] if len(found) == 1 else None


def labelled(samples: Samples, name: str, label: str) -> set[str]:
    return {dict(found)[label] for (n, found), _ in samples.items() if n == name}


def exported(text: str) -> set[str]:
    """Every sample name the exposition declares (a histogram's _bucket, _sum, _count)."""
    names = set()
    for kind_line in re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M):
        name, kind = kind_line
        names.update(
            [f"{name}_bucket", f"{name}_sum", f"{name}_count"] if kind == "histogram" else [name]
        )
    return names


def queried(dashboard: dict[str, Any]) -> set[str]:
    """Every metric name in the dashboard's queries (panels and variables)."""
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    exprs += [v["query"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
    assert exprs
    return {m for e in exprs for m in re.findall(r"\b((?:ha|process)_[a-z_]+)\b", e)}


# COMMAND: exits (3) the first time, having run long enough to be restarted in place
# (--on-exit restart, the default; a first run shorter than STARTED cedes the lead), then runs
ONCE = ["sh", "-c", f'test -e "$0" && exec sleep 600; touch "$0"; sleep {STARTED + 0.5}; exit 3']


def _start(sup: Supervisors, identity: str, tmp_path: Path) -> subprocess.Popen[bytes]:
    argv = ["run", "/svc", "--id", identity, "--http", "127.0.0.1:0", "--health", "true"]
    command = [*ONCE, str(tmp_path / f"{identity}.started")]
    proc = popen_ha(*argv, "--", *command, env=sup.env, log=tmp_path / f"{identity}.log")
    sup.procs[identity] = proc
    return proc


def _port(tmp_path: Path, identity: str) -> int:
    log = tmp_path / f"{identity}.log"
    found = wait_until(
        lambda: re.search(r"http on 127\.0\.0\.1:(\d+)", log.read_text()), f"{identity}'s port"
    )
    return int(found.group(1))


@pytest.mark.parametrize("loop", ["asyncio", "trio"])
def test_metrics_a_dashboard_can_use_from_a_real_ha_run(tmp_path: Path, loop: str) -> None:
    a, b = IDENTITIES
    with Supervisors(tmp_path, HA_ASYNC_BACKEND=loop) as sup:
        _start(sup, a, tmp_path)
        a_port = _port(tmp_path, a)
        wait_until(lambda: maybe(scrape(a_port)[0], "ha_command_starts_total") == 2, "a restart")
        wait_until(lambda: maybe(scrape(a_port)[0], "ha_command_up") == 1, "a's COMMAND")
        _start(sup, b, tmp_path)
        b_port = _port(tmp_path, b)
        wait_until(lambda: maybe(scrape(b_port)[0], "ha_election_has_active") == 1, "b standby")
        wait_until(
            lambda: maybe(scrape(a_port)[0], "ha_command_health_checks_total", result="passed"),
            "a health check",
        )
        active, _ = scrape(a_port)
        standby, _ = scrape(b_port)

        # the active: leads, unpaused, runs COMMAND (started once), healthy
        assert one(active, "ha_election_has_active") == 1
        assert one(active, "ha_election_paused") == 0
        assert one(active, "ha_command_up") == 1
        assert one(active, "ha_command_starts_total") == 2  # exited once, started again
        assert one(active, "ha_command_restarts_total") == 1
        assert one(active, "ha_command_healthy") == 1
        assert one(active, "ha_command_health_checks_total", result="failed") == 0
        since = one(active, "ha_elector_active_since_timestamp_seconds")
        # the standby: sees the active, runs nothing, has no term
        assert one(standby, "ha_election_has_active") == 1
        assert one(standby, "ha_command_up") == 0
        assert one(standby, "ha_command_starts_total") == 0
        assert "ha_elector_active_since_timestamp_seconds" not in {n for n, _ in standby}
        # no identity but the member's own in a label: b stood "behind" a, unnamed
        causes = labelled(standby, "ha_elector_transitions_total", "cause")
        assert "behind" in causes
        for samples, own in ((active, a), (standby, b)):
            for (name, labels), _ in samples.items():
                for key, label in labels:
                    if key != "identity":
                        assert not any(i in label for i in IDENTITIES), (name, key, label)
                    else:
                        assert label == own, name
        # the process and the build
        for samples in (active, standby):
            assert one(samples, "process_cpu_seconds_total") > 0
            assert one(samples, "process_resident_memory_bytes") > 0
            assert 0 < one(samples, "process_open_fds") <= one(samples, "process_max_fds")
            assert one(samples, "ha_build_info", version=version()) == 1
            assert one(samples, "process_start_time_seconds") > 0

        sup.procs[a].kill()  # kill -9: b takes over after sqlite sees a die
        sup.procs[a].wait()
        wait_until(lambda: maybe(scrape(b_port)[0], "ha_command_starts_total") == 2, "b's restart")
        wait_until(lambda: maybe(scrape(b_port)[0], "ha_command_up") == 1, "b's COMMAND")
        after, text = scrape(b_port)

    assert one(after, "ha_elector_active_since_timestamp_seconds") > since  # b's term, later
    # the time without an active: b's takeover plus the detection bound of a crash
    takeover = one(after, "ha_elector_takeover_seconds_sum", kind="failover")
    assert one(after, "ha_election_leaderless_seconds_count", kind="failover") == 1
    leaderless = one(after, "ha_election_leaderless_seconds_sum", kind="failover")
    assert leaderless == pytest.approx(takeover + SQLITE_DETECTION)
    # every metric the dashboard queries is one /metrics exports
    names = queried(json.loads(DASHBOARD.read_text()))
    missing = names - exported(text)
    assert not missing, missing
    assert {
        "ha_election_has_active",
        "ha_election_leaderless_seconds_sum",
        "ha_command_up",
    } <= names


@pytest.mark.spark
@pytest.mark.parametrize("loop", ["asyncio", "trio"])
def test_a_job_manager_exports_its_process_and_build(tmp_path: Path, loop: str) -> None:
    """`ha jobs manager --http` exports ``process_*`` and ``ha_build_info`` as `ha run --http`
    does (a cold standby behind another holder of its election: no JVM needed)."""
    pytest.importorskip("pyspark")  # the command refuses to start without it
    election = "/ha/default/election"
    with Supervisors(tmp_path, HA_ASYNC_BACKEND=loop) as sup:
        sleep = [sys.executable, "-c", "import time; time.sleep(600)"]
        sup.procs["holder"] = popen_ha(
            "run", election, "--id", "holder", "--", *sleep, env=sup.env,
            log=tmp_path / "holder.log",
        )  # fmt: skip
        wait_until(lambda: _leader(sup, election) == "holder", "the holder to lead")
        sup.procs["jm-1"] = popen_ha(
            "jobs", "manager", "--id", "jm-1", "--cold", "--http", "127.0.0.1:0", env=sup.env,
            log=tmp_path / "jm-1.log",
        )  # fmt: skip
        port = _port(tmp_path, "jm-1")
        wait_until(lambda: http_get(port, "/readyz") == (503, b"standby\n"), "jm-1 standby")
        samples, _ = scrape(port)
    assert one(samples, "ha_jobmanager_recoveries_total", identity="jm-1") == 0  # the manager's
    assert one(samples, "process_cpu_seconds_total") > 0
    assert one(samples, "process_resident_memory_bytes") > 0
    assert 0 < one(samples, "process_open_fds") <= one(samples, "process_max_fds")
    assert one(samples, "process_start_time_seconds") > 0
    assert one(samples, "ha_build_info", version=version(), event_loop=loop) == 1


def _leader(sup: Supervisors, election: str) -> str | None:
    result = ha("status", election, "--json", env=sup.env)
    if result.returncode != 0:
        return None  # not yet created (1), or no active yet (3)
    active: str | None = json.loads(result.stdout)["active"]
    return active
