"""`ha run --health`: a failure threshold, as Kubernetes probes have one. Real processes on the
sqlite backend; the health check is a shell script the test steers through files.

The file ``plan`` says "N hold" or "N go": the check fails while N is above 0 (taking one off
each time), then, held, waits until the plan says go: the supervisor is then between two
answers, and what it publishes meanwhile can be read without a race. One file, replaced whole,
so that no check sees half a plan.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import pytest

from ha.errors import ConfigurationError
from ha.supervisor import Settings
from tests.support.cli import Hosts, alive, ha, one_error_line, wait_until

CHECK = r"""
d="$1"
read n then < "$d/plan"
if [ "$n" -gt 0 ]; then
    echo "$((n - 1)) $then" > "$d/plan.$$" && mv "$d/plan.$$" "$d/plan"
    exit 1
fi
while [ "$then" = hold ]; do sleep 0.02; read n then < "$d/plan"; done
"""


def plan(directory: Path, fails: int, then: str = "go") -> None:
    (directory / "plan.tmp").write_text(f"{fails} {then}\n")
    os.replace(directory / "plan.tmp", directory / "plan")


def member(hosts: Hosts, identity: str) -> dict[str, object]:
    found = [m for m in hosts.status()["members"] if m["identity"] == identity]
    assert len(found) == 1
    return found[0]


def test_one_failed_check_keeps_the_lead_and_three_in_a_row_give_it_up(tmp_path: Path) -> None:
    (tmp_path / "check.sh").write_text(CHECK)
    plan(tmp_path, 0)
    check = shlex.join(["sh", str(tmp_path / "check.sh"), str(tmp_path)])
    # the default threshold (3); a check held by the plan gets all the time it needs
    health = ("--health", check, "--health-interval", "0.05", "--health-timeout", "60")
    with Hosts(tmp_path) as hosts:
        hosts.start("a", *health)
        hosts.settled()
        hosts.start("b")
        doc = hosts.settled()
        assert doc["active"] == "a"
        epoch, child = doc["epoch"], hosts.child("a")
        assert child is not None

        # one failure, then a pass held back while we look
        plan(tmp_path, 1, "hold")
        wait_until(lambda: "1 of 3, staying in" in hosts.log("a"), "a's first failed check")
        wait_until(lambda: member(hosts, "a")["note"] == "health check failed 1 of 3", "note")
        assert member(hosts, "a")["state"] == "active"
        plan(tmp_path, 0)
        wait_until(lambda: "passes again, after 1 of 3 failed" in hosts.log("a"), "the pass")
        wait_until(lambda: member(hosts, "a")["note"] == "", "the note cleared")
        doc = hosts.settled()
        assert (doc["active"], doc["epoch"], hosts.child("a")) == ("a", epoch, child)
        assert alive(child[0])  # COMMAND ran on throughout
        assert "leaving the election" not in hosts.log("a")

        # three failures in a row: a leaves, b takes over
        plan(tmp_path, 3)
        wait_until(lambda: hosts.child("b"), "b's COMMAND")
        wait_until(lambda: not alive(child[0]), "a's COMMAND to stop")
        assert "health check failed (exit status 1, 3 times in a row): leaving the election" in (
            hosts.log("a")
        )
        doc = hosts.settled()  # a passes again and queues behind b
        assert doc["active"] == "b" and doc["epoch"] > epoch


def test_health_failures_is_checked() -> None:
    for bad in (0, -1, True, 2.5):
        with pytest.raises(ConfigurationError, match=r"--health-failures must be a whole number"):
            Settings("/svc", "a", ("true",), health_failures=bad)  # type: ignore[arg-type]
    assert Settings("/svc", "a", ("true",)).health_failures == 3


def test_a_bad_health_failures_is_one_line(tmp_path: Path) -> None:
    env = Hosts(tmp_path).env
    result = ha("run", "/svc", "--id", "a", "--health", "true", "--health-failures", "0",
                "--", "true", env=env)  # fmt: skip
    assert one_error_line(result) == (
        "ha: error: --health-failures must be a whole number >= 1 (failed checks in a row"
        " that take this host out), got 0"
    )
    assert result.returncode == 1
