"""The `ha` command in subprocesses: help, errors as one line, status, format."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli import ha, ha_env, one_error_line, sqlite_url

COMMANDS = ["demo", "run", "status", "watch", "failover", "format"]


@pytest.mark.parametrize("command", [*COMMANDS, None])
def test_every_help_has_an_example(tmp_path: Path, command: str | None) -> None:
    args = [command, "--help"] if command else ["--help"]
    result = ha(*args, env=ha_env(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "Example" in result.stdout
    assert "ha " in result.stdout.split("Example", 1)[1]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--url", "bogus", "status", "/x"], "not a backend URL"),
        (["--url", "etcd9://h/x", "status", "/x"], "unknown backend scheme 'etcd9'"),
        (["--url", "sqlite:///no/such/dir/ha.db", "status", "/x"], "does not exist"),
        (["--url", "zk://127.0.0.1:1/x?connect_timeout=0.3", "status", "/x"], "could not reach"),
        (["status", "relative/path"], "must be absolute"),
        (["format", "/"], "root"),
        (["run", "/x", "--id", "a", "--", "no-such-command-xyz"], "command not found"),
        (["run", "/x", "--id", "a", "--grace", "10", "--", "true"], "--grace 10s"),
        (["run", "/x", "--id", "a", "--fence", "'unterminated", "--", "true"], "--fence"),
        (["failover", "/x"], "no active"),
    ],
)
def test_errors_are_one_line(tmp_path: Path, args: list[str], expected: str) -> None:
    result = ha(*args, env=ha_env(tmp_path))
    assert expected in one_error_line(result)


def test_a_file_that_is_not_an_ha_database(tmp_path: Path) -> None:
    (tmp_path / "ha.db").write_bytes(b"not sqlite at all" * 100)
    result = ha("--url", sqlite_url(tmp_path), "status", "/x", env=ha_env(tmp_path))
    assert result.returncode == 1
    assert (
        result.stderr.strip()
        == f"ha: error: {tmp_path / 'ha.db'} is not an ha database (not an SQLite file)"
    )


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    result = ha("--debug", "--url", "bogus", "status", "/x", env=ha_env(tmp_path))
    assert result.returncode != 0
    assert "Traceback" in result.stderr and "ConfigurationError" in result.stderr


def test_no_active_is_exit_code_3(tmp_path: Path) -> None:
    env = ha_env(tmp_path)  # no --url: the default file under the state directory
    assert ha("format", "/other", env=env).returncode == 0  # `ha status` creates no file
    assert (tmp_path / "state" / "ha" / "ha.db").exists()
    result = ha("status", "/x", env=env)
    assert result.returncode == 3
    assert "does not exist" in result.stdout
    result = ha("status", "/x", "--json", env=env)
    assert result.returncode == 3
    assert json.loads(result.stdout)["exists"] is False


def test_url_from_the_environment(tmp_path: Path) -> None:
    env = ha_env(tmp_path, HA_URL=sqlite_url(tmp_path))
    assert ha("format", "/x", env=env).returncode == 0
    assert (tmp_path / "ha.db").exists()
    assert not (tmp_path / "state" / "ha" / "ha.db").exists()
    assert ha("status", "/x", env=env).returncode == 3
    memory = ha("--url", "memory://here", "status", "/x", env=env)
    assert memory.returncode == 3 and "does not exist" in memory.stdout


def test_format(tmp_path: Path) -> None:
    env = ha_env(tmp_path, HA_URL=sqlite_url(tmp_path))
    first = ha("format", "/app/svc", env=env)
    assert first.returncode == 0 and first.stdout.strip() == "/app/svc: created"
    again = ha("format", "/app/svc", env=env)
    assert again.returncode == 0 and again.stdout.strip() == "/app/svc: exists"
    status = json.loads(ha("status", "/app/svc", "--json", env=env).stdout)
    assert status["exists"] and status["active"] is None
    # --force asks first; without a terminal and without --yes it refuses
    refused = ha("format", "/app/svc", "--force", env=env)
    assert refused.returncode == 1 and "add --yes" in refused.stderr
    forced = ha("format", "/app/svc", "--force", "--yes", env=env)
    assert forced.returncode == 0 and forced.stdout.startswith("/app/svc: exists")


def test_status_shows_the_queue_in_order_and_the_leftovers(tmp_path: Path) -> None:
    """`ha status` of a queue held by another process's sessions: the leader (not active yet:
    a crashed leader's breadcrumb awaits its fence), the standbys in the order they would take
    over, and the breadcrumb left behind; in JSON and as text."""
    import anyio

    from ha.drivers import connect
    from ha.election.names import Breadcrumb, ticket_for
    from ha.election.nodes import ElectionNodes

    url = sqlite_url(tmp_path)
    env = ha_env(tmp_path, HA_URL=url)
    assert ha("format", "/svc", env=env).returncode == 0
    nodes = ElectionNodes("/svc")

    async def go() -> tuple[dict[str, object], str]:
        async with connect(url) as driver:
            crashed = await nodes.join(driver, ticket_for(b"old", "n0"), Breadcrumb(b"old"))
            for who in (b"b", b"c", b"a"):
                await nodes.join(driver, ticket_for(who, "n1"), Breadcrumb(who, data=b"d-" + who))
            await driver.delete(nodes.node(crashed))  # its breadcrumb stays
            doc = await anyio.to_thread.run_sync(lambda: ha("status", "/svc", "--json", env=env))
            text = await anyio.to_thread.run_sync(lambda: ha("status", "/svc", env=env))
        assert doc.returncode == 3 and text.returncode == 3, doc.stderr + text.stderr
        return json.loads(doc.stdout), text.stdout

    doc, text = anyio.run(go)
    assert doc["active"] is None and doc["holder"] == "b"
    contenders = doc["contenders"]
    assert isinstance(contenders, list)
    assert [c["identity"] for c in contenders] == ["b", "c", "a"]
    assert doc["epoch"] == contenders[0]["epoch"]
    assert [c["breadcrumb"]["data"] for c in contenders] == ["d-b", "d-c", "d-a"]
    (left,) = doc["leftovers"]  # type: ignore[misc]
    assert left["awaits_fence"] and left["breadcrumb"]["identity"] == "old"
    lines = text.splitlines()
    assert "b leads" in lines[1]
    queue = [line.split()[:3] for line in lines if line.strip()[:2] in ("1.", "2.", "3.")]
    assert queue == [["1.", "leader", "b"], ["2.", "standby", "c"], ["3.", "standby", "a"]]
    assert any("left breadcrumb  old" in line and "fences it" in line for line in lines)
