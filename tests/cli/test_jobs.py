"""`ha jobs`, `ha report` and `ha demo --pipeline` in subprocesses.

Fast (no Spark): help texts, a malformed job refused at submission with the plan's message,
submit/list/status/cancel on a cluster that has no job manager running, a missing PySpark
said in one line. Marked ``spark`` (each command starts its own JVM, 10-40 s each): `ha report`
on generated journals with and without an injected overlap, a real `ha jobs manager` running a
submitted job, and `ha demo --pipeline` end to end.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import subprocess
from pathlib import Path

import pytest

from tests.support.cli import ha, ha_env, one_error_line, popen_ha, stop_procs, wait_until

SPARK = importlib.util.find_spec("pyspark") is not None
needs_pyspark = pytest.mark.skipif(not SPARK, reason="PySpark is not installed (ha-elector[spark])")

COMMANDS = [
    ["jobs"],
    ["jobs", "submit"],
    ["jobs", "list"],
    ["jobs", "status"],
    ["jobs", "cancel"],
    ["jobs", "manager"],
    ["report"],
]


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """The default backend: the sqlite file of the test's own state directory."""
    return ha_env(tmp_path)


@pytest.fixture
def clicks(tmp_path: Path) -> Path:
    """An input directory for clicks.sessionize: submission only lists the files' names."""
    root = tmp_path / "clicks"
    root.mkdir()
    for day in range(4):
        (root / f"clicks-{day:04d}.parquet").write_bytes(b"")
    return root


# --- help ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_every_help_has_an_example(tmp_path: Path, command: list[str]) -> None:
    result = ha(*command, "--help", env=ha_env(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "Example" in result.stdout
    assert "ha " in result.stdout.split("Example", 1)[1]


def test_help_says_the_defaults_and_exit_codes(tmp_path: Path) -> None:
    env = ha_env(tmp_path)
    submit = " ".join(ha("jobs", "submit", "--help", env=env).stdout.split())
    assert "[default: default]" in submit  # --cluster
    assert "blobs/ next to the backend's sqlite file" in submit
    assert "state directory's blobs/" in submit
    manager = " ".join(ha("jobs", "manager", "--help", env=env).stdout.split())
    assert "[default: local[2]]" in manager and "--hot-standby / --cold" in manager
    report = " ".join(ha("report", "--help", env=env).stdout.split())
    assert "Exit code 0 when no overlapping leadership was found, 4 when some was" in report
    demo = " ".join(ha("demo", "--help", env=env).stdout.split())
    assert "--pipeline" in demo and "ha demo --pipeline" in demo


# --- submission refused -------------------------------------------------------------------------


REFUSED = [
    (["nope"], 1, "job refused: unknown pipeline 'nope'; registered: clicks.sessionize"),
    ([], 1, "job refused: pipeline 'clicks.sessionize' needs parameter 'input'"),
    (["-p", "input={clicks}", "-p", "colour=red"], 1, "has no parameter 'colour'"),
    (["-p", "input={clicks}", "-p", "gap_seconds=soon"], 1, "'gap_seconds' must be int"),
    (["-p", "input={clicks}", "-p", "gap_seconds=0"], 1, "gap_seconds must be positive"),
    (["-p", "input={empty}"], 1, "job refused: no *.parquet file in"),
    (["-p", "input={tmp}/missing"], 1, "input directory does not exist"),
    (["-p", "input={clicks}", "--job-id", "bad/id"], 1, "job refused: bad job id 'bad/id'"),
    (["-p", "input={clicks}", "--max-attempts", "0"], 1, "max_attempts must be a positive"),
    (["-p", "input={clicks}", "--output", "{clicks}"], 1, "is not empty; use a new or empty"),
    (["-p", "input={clicks}", "--output", "s3://b/out"], 1, "must be a local directory"),
    (["-p", "input={clicks}", "--import", "no.such.mod"], 1, "cannot import pipeline module"),
    (["-p", "input"], 2, "-p: expected NAME=VALUE, got 'input'"),
    (["-p", "input={clicks}", "-p", "input=x"], 2, "parameter 'input' given twice"),
    (["-p", "input={clicks}", "--timeout", "1"], 2, "--timeout goes with --wait"),
    (["-p", "input={clicks}", "--cluster", "a/b"], 2, "cluster id must be"),
]


@pytest.mark.parametrize(("args", "code", "expected"), REFUSED)
def test_a_malformed_job_is_refused_at_submission(
    tmp_path: Path, env: dict[str, str], clicks: Path, args: list[str], code: int, expected: str
) -> None:
    (tmp_path / "empty").mkdir()
    where = {"clicks": str(clicks), "empty": str(tmp_path / "empty"), "tmp": str(tmp_path)}
    args = [a.format(**where) for a in args]
    if "nope" not in args:
        args.insert(0, "clicks.sessionize")
    if "--output" not in args:
        args += ["--output", str(tmp_path / "out")]
    result = ha("jobs", "submit", *args, env=env)
    assert expected in one_error_line(result)
    assert result.returncode == code
    assert result.stdout == ""


def test_a_refused_job_leaves_nothing_behind(
    tmp_path: Path, env: dict[str, str], clicks: Path
) -> None:
    out = tmp_path / "out"
    refused = ha(
        "jobs", "submit", "clicks.sessionize", "-p", "input=/nope", "-o", str(out), env=env
    )
    assert refused.returncode == 1
    # not even the database: listing says there is none (read-only commands create nothing)
    listed = ha("jobs", "list", "--json", env=env)
    assert listed.returncode == 1 and listed.stdout == ""
    assert one_error_line(listed).startswith("ha: error: no ha database at ")
    assert not out.exists()


# --- jobs without a job manager -----------------------------------------------------------------


@pytest.mark.parametrize("async_backend", ["asyncio", "trio"])
def test_submit_list_status_cancel_without_a_manager(
    tmp_path: Path, clicks: Path, async_backend: str
) -> None:
    env = ha_env(tmp_path, HA_ASYNC_BACKEND=async_backend)
    out = tmp_path / "sessions"
    submit = [
        "jobs",
        "submit",
        "clicks.sessionize",
        "-p",
        f"input={clicks}",
        "-p",
        "gap_seconds=900",
    ]

    first = ha(*submit, "--output", str(out), "--job-id", "j1", env=env)
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines() == [
        f"submitted job j1 to cluster 'default': clicks.sessionize, 4 batches, output {out}",
        "no job manager is active in cluster 'default': the job waits for one"
        " (`ha jobs manager --id NAME`)",
    ]
    again = ha(*submit, "--output", str(out), "--job-id", "j1", env=env)
    assert "job 'j1' is already submitted" in one_error_line(again)

    # without --job-id: PIPELINE-<hex>, printed
    second = ha(*submit, "--output", str(tmp_path / "other"), env=env)
    assert second.returncode == 0, second.stderr
    found = re.search(r"submitted job (clicks\.sessionize-[0-9a-f]+) ", second.stdout)
    assert found is not None, second.stdout
    other_id = found.group(1)

    listed = ha("jobs", "list", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    jobs = {j["job_id"]: j for j in json.loads(listed.stdout)}
    assert set(jobs) == {"j1", other_id}
    assert jobs["j1"] == {
        "job_id": "j1",
        "state": "submitted",
        "pipeline": "clicks.sessionize",
        "batches_done": 0,
        "batches": 4,
        "output": str(out),
        "error": None,
        "cancel_requested": False,
    }
    table = ha("jobs", "list", env=env)
    assert table.returncode == 0, table.stderr
    row = next(line for line in table.stdout.splitlines() if line.split()[0] == "j1")
    assert row.split()[1:4] == ["submitted", "clicks.sessionize", "0/4"]

    status = ha("jobs", "status", "j1", env=env)
    assert status.returncode == 0, status.stderr
    assert status.stdout.split("\n")[0].split() == ["job", "j1", "submitted", "clicks.sessionize"]
    assert "0/4 committed" in status.stdout and str(out) in status.stdout

    cancel = ha("jobs", "cancel", "j1", env=env)
    assert cancel.returncode == 0, cancel.stderr
    assert cancel.stdout.strip() == (
        "asked the next active job manager (none is active now) to cancel job j1 (submitted)"
    )
    assert ha("jobs", "cancel", "j1", env=env).returncode == 0  # asking twice is fine
    after = ha("jobs", "status", "j1", "--json", env=env)
    assert after.returncode == 0, after.stderr
    doc = json.loads(after.stdout)
    assert doc["state"] == "submitted" and doc["cancel_requested"] is True
    assert "cancel requested" in ha("jobs", "status", "j1", env=env).stdout

    waited = ha(
        *submit, "-o", str(tmp_path / "w"), "--job-id", "w", "--wait", "--timeout", "0.3", env=env
    )
    assert "job w not finished after 0.3s (still submitted, 0/4 batches)" in one_error_line(waited)
    assert waited.returncode == 1

    for command in ("status", "cancel"):
        unknown = ha("jobs", command, "nope", env=env)
        assert one_error_line(unknown) == "ha: error: no job 'nope' in cluster 'default'"
        assert unknown.returncode == 1


def test_clusters_are_separate(tmp_path: Path, clicks: Path) -> None:
    env = ha_env(tmp_path, HA_CLUSTER="nightly")  # the environment names the cluster
    done = ha("jobs", "submit", "clicks.sessionize", "-p", f"input={clicks}", "-o",
              str(tmp_path / "out"), "--job-id", "n1", env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "to cluster 'nightly'" in done.stdout
    nightly = ha("jobs", "list", "--cluster", "nightly", "--json", env=ha_env(tmp_path))
    assert [j["job_id"] for j in json.loads(nightly.stdout)] == ["n1"]
    default = ha("jobs", "list", env=ha_env(tmp_path))
    assert default.returncode == 0 and default.stdout.strip() == "no jobs in cluster 'default'"


# --- Spark missing, and what is checked before Spark starts -------------------------------------


def test_spark_commands_without_pyspark_say_what_to_install(tmp_path: Path) -> None:
    fake = tmp_path / "nopyspark" / "pyspark"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'pyspark'\", name='pyspark')\n"
    )
    journal = tmp_path / "j.jsonl"
    journal.write_text("")
    env = ha_env(tmp_path, PYTHONPATH=str(fake.parent))
    for args in (
        # Spark asked for: a small journal's report runs without it (--engine auto: local)
        ["report", str(journal), "--out", str(tmp_path / "r.html"), "--engine", "spark"],
        ["jobs", "manager", "--id", "jm-1"],
        ["demo", "--pipeline"],
    ):
        result = ha(*args, env=env)
        line = one_error_line(result)
        assert result.returncode == 1
        assert "needs PySpark" in line and "pip install 'ha-elector[spark]'" in line, line
    assert not (tmp_path / "r.html").exists()


@needs_pyspark
@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["report", "{tmp}/missing.jsonl"], "ha: error: no such journal: {tmp}/missing.jsonl"),
        (["report", "{tmp}/none-*.jsonl"], "ha: error: no journal matches '{tmp}/none-*.jsonl'"),
        (
            ["report", "{tmp}/j.jsonl", "--out", "{tmp}/no/dir/r.html"],
            "ha: error: cannot write {tmp}/no/dir/r.html: no directory {tmp}/no/dir",
        ),
        (
            ["jobs", "manager", "--id", "jm-1", "--import", "no.such.mod"],
            "ha: error: cannot import pipeline module 'no.such.mod': No module named 'no'",
        ),
    ],
)
def test_refused_before_spark_starts(
    tmp_path: Path, env: dict[str, str], args: list[str], expected: str
) -> None:
    (tmp_path / "j.jsonl").write_text("")
    result = ha(*[a.format(tmp=tmp_path) for a in args], env=env)
    assert one_error_line(result) == expected.format(tmp=tmp_path)
    assert result.returncode == 1
    assert "Java" not in result.stderr and "Spark" not in result.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["jobs", "manager", "--id", "jm-1", "--master", "bogus"],
        ["report", "j.jsonl", "--master", "x"],
    ],
)
def test_a_master_spark_cannot_take_is_refused(env: dict[str, str], args: list[str]) -> None:
    # checked before any JVM starts: a job manager whose Spark cannot start is no standby
    result = ha(*args, env=env)
    assert "Spark takes local[N], spark://HOST:PORT, yarn or k8s://URL" in one_error_line(result)
    assert result.returncode == 2


def test_debug_shows_the_traceback(env: dict[str, str]) -> None:
    result = ha("--debug", "jobs", "status", "nope", env=env)
    assert result.returncode == 1
    assert "Traceback" in result.stderr and "ConfigurationError" in result.stderr


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--rounds", "3"], "at most twice"),
        (["--url", "memory://x"], "no --url"),
        (["--path", "/x"], "--path does not go with --pipeline"),
    ],
)
def test_demo_pipeline_usage_errors(env: dict[str, str], args: list[str], expected: str) -> None:
    result = ha("demo", "--pipeline", *args, env=env)
    assert expected in one_error_line(result)
    assert result.returncode == 2


def test_demo_workdir_needs_pipeline(tmp_path: Path, env: dict[str, str]) -> None:
    result = ha("demo", "--workdir", str(tmp_path / "w"), env=env)
    assert one_error_line(result) == "ha: error: --workdir goes with --pipeline"
    assert result.returncode == 2 and not (tmp_path / "w").exists()


# --- with Spark ---------------------------------------------------------------------------------


@pytest.mark.spark
@needs_pyspark
def test_report_exit_code_says_leadership_overlapped(tmp_path: Path, env: dict[str, str]) -> None:
    # exit code 0, a glob of journals and a page saying there is no overlap: test_command.py
    from ha.report.synthetic import generate_journal

    truth = generate_journal(tmp_path / "j", events=2_000, elections=2, overlaps=1, seed=1)
    assert len(truth.overlaps) == 1
    out = tmp_path / "report.html"
    result = ha("report", str(tmp_path / "j"), "--out", str(out), env=env, timeout=100)
    assert "Traceback" not in result.stderr
    assert "ha: error" not in result.stderr
    assert f"{truth.events:,} events" in result.stdout  # the summary table's title
    assert "/service-000" in result.stdout and "/service-001" in result.stdout
    assert f"wrote {out}" in result.stdout
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>") or "<html" in page[:200]
    assert "data:image/svg+xml;base64," in page  # plots embedded
    assert result.returncode == 4, result.stdout + result.stderr
    assert "OVERLAP: 1 overlapping leadership interval(s)" in result.stdout
    assert "1 overlapping leadership interval(s)" in page
    assert truth.overlaps[0].first in page and truth.overlaps[0].second in page


@pytest.mark.spark
@needs_pyspark
@pytest.mark.timeout(150)
def test_a_job_manager_runs_a_submitted_job(tmp_path: Path, env: dict[str, str]) -> None:
    from ha.pipeline.commit import committed_batches
    from ha.pipeline.examples.clicks import generate_clicks

    generate_clicks(tmp_path / "clicks", days=2, rows_per_day=2_000, users=50, seed=3)
    log = tmp_path / "jm-1.log"
    journal = tmp_path / "jm-1.jsonl"
    manager = popen_ha("jobs", "manager", "--id", "jm-1", "--journal", str(journal),
                       env=env, log=log)  # fmt: skip
    try:
        out = tmp_path / "sessions"
        done = ha("jobs", "submit", "clicks.sessionize", "-p", f"input={tmp_path / 'clicks'}",
                  "-o", str(out), "--job-id", "s1", "--wait", "--timeout", "100",
                  env=env, timeout=110)  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr + log.read_text()
        assert done.stdout.splitlines()[-1] == f"job s1 succeeded: 2/2 batches, output {out}"
        assert committed_batches(out) == [0, 1]
        status = json.loads(ha("jobs", "status", "s1", "--json", env=env).stdout)
        assert status["state"] == "succeeded" and status["batches_done"] == 2
        cancel = ha("jobs", "cancel", "s1", env=env)
        assert cancel.stdout.strip() == "job s1 already succeeded: nothing to cancel"
        # the default blob directory: next to the default sqlite file
        assert (tmp_path / "state" / "ha" / "blobs").is_dir()

        # a running job: its plan is read from the blob directory, then it is cancelled
        slow = ha("jobs", "submit", "clicks.sessionize", "-p", f"input={tmp_path / 'clicks'}",
                  "-p", "delay_seconds=3", "-o", str(tmp_path / "slow"), "--job-id", "s2",
                  env=env)  # fmt: skip
        assert slow.returncode == 0, slow.stderr

        def state(*extra: str) -> str:
            return str(
                json.loads(ha("jobs", "status", "s2", "--json", *extra, env=env).stdout)["state"]
            )

        wait_until(lambda: state() == "running", "job s2 running", within=30)
        elsewhere = ha("jobs", "status", "s2", "--blobs", str(tmp_path / "elsewhere"), env=env)
        line = one_error_line(elsewhere)
        assert "blob is missing" in line and "is it " + str(tmp_path / "elsewhere") in line
        cancel = ha("jobs", "cancel", "s2", env=env)
        assert cancel.returncode == 0, cancel.stderr
        assert (
            cancel.stdout.strip()
            == "asked the active job manager (jm-1) to cancel job s2 (running)"
        )
        wait_until(lambda: state() == "cancelled", "job s2 cancelled", within=30)
        assert committed_batches(tmp_path / "slow") in ([], [0])  # cancelled mid-job
    finally:
        manager.send_signal(signal.SIGTERM)  # leaves the election gracefully
        try:
            code = manager.wait(timeout=30)
        except subprocess.TimeoutExpired:
            manager.kill()
            manager.wait()
            raise
    text = log.read_text()
    assert code == 0, text
    assert "Traceback" not in text
    # its first line names the election it joins (ha status and ha failover take that path)
    assert re.search(r"^\S+ jm-1 started election=/ha/\S+/election ", text, re.M), text
    # the default: a hot standby that also warms streams (a tiny stream, then rehearsals)
    assert re.search(r" started .* hot_standby=true warm_streams=true$", text, re.M), text
    assert re.search(r"^\S+ jm-1 active epoch=\d+$", text, re.M), text
    assert re.search(r"^\S+ jm-1 job_finished job=s1 outcome=succeeded ", text, re.M), text
    records = [json.loads(line) for line in journal.read_text().splitlines()]
    assert records and records[0]["identity"] == "jm-1"
    assert any(r["to"] == "active" for r in records)


@pytest.mark.spark
@needs_pyspark
@pytest.mark.timeout(300)
def test_a_job_manager_that_lost_spark_exits_69(tmp_path: Path, env: dict[str, str]) -> None:
    """Its JVM killed under a running stream, the job manager leaves the election and exits
    with EX_UNAVAILABLE (69), one line saying why: systemd's Restart=on-failure (a pod's
    restart policy) starts it again with a new JVM. Before, it exited 0, and stayed down."""
    from ha.pipeline.examples.events import generate_events
    from tests.support.processes import java_under

    generate_events(tmp_path / "in", files=8, rows=50, users=5)
    log = tmp_path / "jm-1.log"
    manager = popen_ha("jobs", "manager", "--id", "jm-1", "--no-warm-streams", env=env, log=log)
    try:
        submitted = ha("jobs", "submit", "events.count", "-p", f"input={tmp_path / 'in'}",
                       "-p", "delay_seconds=2", "-o", str(tmp_path / "out"), "--job-id", "s",
                       env=env)  # fmt: skip
        assert submitted.returncode == 0, submitted.stderr

        def state() -> str:
            return str(json.loads(ha("jobs", "status", "s", "--json", env=env).stdout)["state"])

        wait_until(lambda: state() == "running", "stream s running", within=200)
        [jvm] = java_under(manager.pid)
        os.kill(jvm, signal.SIGKILL)
        code = manager.wait(timeout=60)
    finally:
        stop_procs([manager])
    text = log.read_text()
    assert code == 69, text  # the contract, documented: not imported
    assert "Traceback" not in text
    errors = [line for line in text.splitlines() if line.startswith("ha: error: ")]
    assert errors == ["ha: error: Spark's JVM is gone: job manager jm-1 left the election"], text


@pytest.mark.spark
@needs_pyspark
@pytest.mark.timeout(200)
def test_demo_pipeline_end_to_end(tmp_path: Path) -> None:
    # About 40 s on 2 cores: three JVMs, an 8-batch job killed once, and the reference run.
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = ha_env(tmp_path, TMPDIR=str(scratch))
    result = ha("demo", "--pipeline", env=env, timeout=190)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "SIGKILL jm-" in out and "resumed the job at batch" in out
    assert "job succeeded: 8/8 batches" in out
    last = out.strip().splitlines()[-1]
    found = re.fullmatch(
        r"ok: the job succeeded despite 1 SIGKILL of the active; recovery \(kill to the next"
        r" batch on the new active\): jm-\d ([0-9.]+) s; output identical, byte for byte, to the"
        r" uninterrupted run \(sha256 [0-9a-f]{16}\.\.\.\)",
        last,
    )
    assert found is not None, last
    assert float(found.group(1)) < 30
    assert "Traceback" not in result.stderr
    assert list(scratch.iterdir()) == []  # the temporary directory is gone
    # Progress on stderr, a pipe here: one plain line per committed batch, the job's in order
    # and then the reference run's.
    told = [line for line in result.stderr.splitlines() if line.startswith("ha demo: [")]
    steps = [("demo", b) for b in range(8)] + [("reference", b) for b in range(8)]
    assert [re.sub(r" on jm-\d$", "", line) for line in told] == [
        f"ha demo: [{n + 1}/16] {job}: batch {b} committed" for n, (job, b) in enumerate(steps)
    ], result.stderr
