"""Operating `ha run`: its --http endpoint scraped and parsed while two hosts hand over, on
sqlite and ZooKeeper; JSON logs; the health check's output prefixed. Real processes."""

from __future__ import annotations

import json
import os
import re
import socket
from pathlib import Path
from typing import Any

import pytest

from tests.support.backends.zookeeper import ZooKeeperBackend, zookeeper_backend, zookeeper_server
from tests.support.cli import Supervisors, ha, one_error_line, popen_ha, wait_until
from tests.support.http import SLEEP, Hosts, http_get
from tests.support.metrics import total, value

__all__ = ("zookeeper_backend", "zookeeper_server")  # fixtures, until the plugin is registered


def handover(hosts: Hosts) -> None:
    hosts.start("a")
    wait_until(lambda: hosts.ready("a"), "a to be ready")
    hosts.start("b")
    b = hosts.port("b")
    wait_until(lambda: json.loads(http_get(b, "/healthz")[1])["state"] == "standby", "b standby")
    assert http_get(b, "/readyz") == (503, b"standby\n")

    status, body = http_get(b, "/leader")
    leader = json.loads(body)
    assert status == 200 and leader["identity"] == "a" and leader["self"] is False
    a_labels = {"election": "/svc", "identity": "a"}
    metrics_a = hosts.metrics("a")
    assert value(metrics_a, "ha_elector_is_leader", **a_labels) == 1
    assert value(metrics_a, "ha_elector_epoch", **a_labels) == leader["epoch"]
    assert value(hosts.metrics("b"), "ha_elector_is_leader", election="/svc", identity="b") == 0

    hosts.procs["a"].terminate()  # a leaves gracefully: b takes over, fencing nobody
    wait_until(lambda: hosts.ready("b"), "b to be ready")
    metrics_b = hosts.metrics("b")
    b_labels = {"election": "/svc", "identity": "b"}
    assert value(metrics_b, "ha_elector_takeover_seconds_count", **b_labels, kind="handover") == 1
    took_over = {**b_labels, "from": "standby", "to": "active"}
    assert total(metrics_b, "ha_elector_transitions_total", **took_over) == 1
    assert total(metrics_b, "ha_backend_operation_seconds_count") > 0
    leader_b = json.loads(http_get(b, "/leader")[1])
    assert leader_b["identity"] == "b" and leader_b["self"] is True
    assert leader_b["epoch"] > leader["epoch"]


@pytest.mark.parametrize("async_backend", ["asyncio", "trio"])
def test_run_http_on_sqlite(tmp_path: Path, async_backend: str) -> None:
    with Hosts(tmp_path, HA_ASYNC_BACKEND=async_backend) as hosts:
        handover(hosts)


def test_run_http_errors_are_one_line(tmp_path: Path) -> None:
    env = Supervisors(tmp_path).env
    line = one_error_line(ha("run", "/svc", "--id", "a", "--http", "8008", "--", *SLEEP, env=env))
    assert line == "ha: error: --http '8008': give HOST:PORT, e.g. 127.0.0.1:8008"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        address = f"127.0.0.1:{port}"
        result = ha("run", "/svc", "--id", "a", "--http", address, "--", *SLEEP, env=env)
    assert one_error_line(result).startswith(f"ha: error: cannot serve http on {address}: ")


@pytest.mark.zookeeper
def test_run_http_on_zookeeper(zookeeper_backend: ZooKeeperBackend, tmp_path: Path) -> None:
    with Hosts(tmp_path, zookeeper_backend.url() + "?session_timeout=2") as hosts:
        handover(hosts)


def test_json_logs_carry_the_structured_fields(tmp_path: Path) -> None:
    with Hosts(tmp_path, HA_LOG_FORMAT="json") as hosts:
        hosts.start("a", "--log-level", "info")
        wait_until(lambda: hosts.ready("a"), "a to be ready")
        hosts.stop_all()
        records = [json.loads(line) for line in hosts.log("a").splitlines()]  # every line
    won = [r for r in records if r["logger"] == "ha.elector" and r.get("to_state") == "active"]
    assert won and won[0]["identity"] == "a" and won[0]["election"] == "/svc"
    assert isinstance(won[0]["epoch"], int) and won[0]["level"] == "info"
    assert any(r.get("run_as") == "a" and r["logger"] == "ha.supervisor" for r in records)


@pytest.mark.parametrize("async_backend", ["asyncio", "trio"])
def test_json_transition_lines_carry_the_fields_at_the_default_level(
    tmp_path: Path, async_backend: str
) -> None:
    """Without --log-level, the lines a log shipper gets for each transition are the
    supervisor's: they carry the structured fields too (issue 30)."""
    with Hosts(tmp_path, HA_LOG_FORMAT="json", HA_ASYNC_BACKEND=async_backend) as hosts:
        handover(hosts)  # a active, b standby; a leaves, b takes over
        hosts.stop_all()
        logs = {name: [json.loads(line) for line in hosts.log(name).splitlines()] for name in "ab"}
    moves: dict[str, list[dict[str, Any]]] = {}
    for name, records in logs.items():
        moves[name] = [r for r in records if re.fullmatch(r"\w+ -> \w+ \(.*\)", r["message"])]
        for r in moves[name]:
            assert r["logger"] == "ha.supervisor" and r["level"] == "info"
            assert (r["election"], r["identity"], r["run_as"]) == ("/svc", name, name)
            assert r["message"].startswith(f"{r['from_state']} -> {r['to_state']} (")
            assert isinstance(r["cause"], str) and r["cause"] in r["message"]
            assert (r["epoch"] is not None) == (f"(epoch {r['epoch']}, " in r["message"])
    assert [r["to_state"] for r in moves["a"]] == ["active", "neutral"]
    assert [r["to_state"] for r in moves["b"]] == ["standby", "active", "neutral"]
    first, second = moves["a"][0]["epoch"], moves["b"][1]["epoch"]
    assert isinstance(first, int) and isinstance(second, int) and second > first


def test_the_health_checks_output_is_prefixed(tmp_path: Path) -> None:
    check = "sh -c 'echo first line; echo to stderr >&2; exit 1'"
    with Hosts(tmp_path) as hosts:
        hosts.start("a", "--health", check, "--health-interval", "0.2")
        wait_until(lambda: "health: to stderr" in hosts.log("a"), "the check's output")
        hosts.stop_all()
        lines = hosts.log("a").splitlines()
    assert any(line.endswith("ha run a: health: first line") for line in lines)
    assert "first line" not in lines and "to stderr" not in lines  # never copied raw


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.timeout(150)
def test_job_manager_http(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """`ha jobs manager --http`: ready while active, its batches and recovery counted."""
    # a JVM and a job: about 40 s on 2 cores (tests/http/test_http.py serves a standby's)
    if "slow" not in (request.config.getoption("markexpr") or "") and not os.environ.get("HA_SLOW"):
        pytest.skip("a job manager runs a job on Spark (40 s): select with -m slow or HA_SLOW=1")
    pytest.importorskip("pyspark")
    from ha.pipeline.examples.clicks import generate_clicks

    generate_clicks(tmp_path / "clicks", days=2, rows_per_day=500, users=20, seed=1)
    with Hosts(tmp_path) as hosts:
        log = tmp_path / "jm-1.log"
        hosts.procs["jm-1"] = popen_ha(
            "jobs", "manager", "--id", "jm-1", "--http", "127.0.0.1:0", env=hosts.env, log=log
        )
        done = ha(
            "jobs", "submit", "clicks.sessionize", "-p", f"input={tmp_path / 'clicks'}",
            "-o", str(tmp_path / "out"), "--job-id", "s1", "--wait", "--timeout", "100",
            env=hosts.env, timeout=110,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr + log.read_text()
        assert hosts.ready("jm-1")
        samples = hosts.metrics("jm-1")
        labels = {"identity": "jm-1"}
        assert value(samples, "ha_jobmanager_batches_total", **labels, outcome="committed") == 2
        assert value(samples, "ha_jobmanager_recoveries_total", **labels) == 1
        assert value(samples, "ha_jobmanager_jobs_total", **labels, event="finished_succeeded") == 1
        election = json.loads(http_get(hosts.port("jm-1"), "/leader")[1])
        assert election["identity"] == "jm-1" and election["self"] is True
        assert (
            value(samples, "ha_elector_is_leader", election="/ha/default/election", identity="jm-1")
            == 1
        )
