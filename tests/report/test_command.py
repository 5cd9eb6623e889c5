"""`ha report` as a user runs it (a subprocess): what reaches the terminal.

An unreachable spark:// master is one line before any JVM starts; a report prints its table
and its verdict, and on stderr its stages as plain lines (not a terminal), nothing of the
JVM's (banner, log4j, stack traces).
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from tests.support.cli import ha, ha_env, one_error_line  # noqa: E402

KEYS = ("ts", "election", "identity", "from", "to", "epoch", "cause")
# A kill -9 of the active on ZooKeeper (session timeout 4 s): a never records its end.
KILLED = [
    (1_790_000_000.0, "/svc", "a", "neutral", "active", 11, "first in the queue"),
    (1_790_000_003.0, "/svc", "b", "neutral", "standby", None, "behind a"),
    (1_790_000_007.8, "/svc", "b", "standby", "active", 16, "won the election"),
    (1_790_000_016.0, "/svc", "b", "active", "neutral", None, "quit"),
]


def _journal(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(dict(zip(KEYS, r, strict=True))) + "\n" for r in KILLED))
    return path


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # nothing listens once it is closed


def test_an_unreachable_master_is_one_line_before_spark_starts(tmp_path: Path) -> None:
    port = _closed_port()
    result = ha(
        "report", str(_journal(tmp_path / "j.jsonl")), "--out", str(tmp_path / "r.html"),
        "--master", f"spark://127.0.0.1:{port}",
        env=ha_env(tmp_path), timeout=30,
    )  # fmt: skip
    assert one_error_line(result) == (
        f"ha: error: cannot reach the Spark master (127.0.0.1:{port}: Connection refused)"
    )
    assert result.returncode == 1
    assert not (tmp_path / "r.html").exists()


@pytest.mark.spark
def test_the_report_keeps_the_jvm_off_stderr_and_shows_the_crash(tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    _journal(tmp_path / "j" / "a.jsonl")
    result = ha(
        "report", str(tmp_path / "j" / "*.jsonl"), "--out", str(out),  # a glob, expanded by ha
        "--session-timeout", "4", "--engine", "spark",  # a JVM, kept quiet
        env=ha_env(tmp_path), timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    # Not a terminal: one plain line per stage, and nothing else (no banner, no log4j, no
    # WARN NativeCodeLoader); the progress stays off stdout.
    assert result.stderr.splitlines() == [
        "ha report: [1/5] reading the journals",
        "ha report: [2/5] leadership intervals and summary",
        "ha report: [3/5] overlaps and failover gaps",
        "ha report: [4/5] data for the plots",
        "ha report: [5/5] writing the HTML report",
    ]
    assert "ha report:" not in result.stdout
    lines = result.stdout.splitlines()
    table = lines[: [n for n, line in enumerate(lines) if line.startswith("wrote ")][0]]
    assert max(len(line) for line in table) <= 80  # COLUMNS is 200: the table's own width
    [row] = [line.split() for line in lines if line.startswith("/svc")]
    # failovers, crashes, gap p50, gap max, overlaps, available: 4 s without an active
    assert row[1:] == ["1", "1", "4.00", "s", "4.00", "s", "0", "75.000%"]
    assert lines[-1] == "no overlapping leadership"  # and exit code 0, above
    page = out.read_text()
    assert "data:image/svg+xml;base64," in page and "No overlapping leadership." in page
