"""``python -m tests.support.kubeapi`` (the FAKE API server's command) refuses bad input
with one line, never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.kubeapi.process import ROOT, FakeKubeApi


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tests.support.kubeapi", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_bad_state_file_and_busy_port_are_one_line_errors(
    tmp_path: Path, kube_api: FakeKubeApi
) -> None:
    state = tmp_path / "state.json"
    state.write_text("not json\n")
    corrupt = run("--state-file", str(state))
    assert corrupt.returncode == 1
    assert corrupt.stderr.strip().splitlines() == [
        f"cannot use the state file {state}: its first line is not a snapshot"
    ]
    busy = run("--port", str(kube_api.port))
    assert busy.returncode == 1
    (line,) = busy.stderr.strip().splitlines()
    assert line.startswith(f"cannot listen on 127.0.0.1:{kube_api.port}: ")
