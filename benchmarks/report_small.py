"""``ha report`` on small journals as a user runs it: the command's wall and CPU seconds.

    .venv/bin/python benchmarks/report_small.py [--events 1000,10000,100000] [--runs 3]
        [--spark-up-to 10000] [--keep DIR]

For each size, a journal of that many events (``ha.report.synthetic``, 3 elections), then:

- **command**: ``python -m ha report JOURNAL --out FILE --engine local`` in a subprocess, the
  best of ``--runs``: wall seconds, and CPU seconds of the process and the children it reaped;
- **split**: the same work in a fresh process of its own, timed in parts: *import* (the
  interpreter's start and every module the command imports before its first stage: ha.cli,
  numpy, pandas, pyarrow), *analysis* (``analyze_local``), *charts* (``render_html``: the
  charts and the page);
- **Spark** beside it, the baseline of the ratio: the command with ``--engine spark`` and the
  same split, where *import* includes starting the JVM and the CPU columns add the JVM's own
  (read from /proc; the command's, as this process adopts and reaps the JVM it leaves
  behind); run for sizes up to ``--spark-up-to`` (a JVM takes tens of seconds on a busy
  machine).

Compiled modules: the children write and read their bytecode under a temporary
``PYTHONPYCACHEPREFIX`` (an installed package has its .pyc files; a checkout run with
``PYTHONDONTWRITEBYTECODE`` compiles ha's sources on every start, about 0.3 CPU-s more), and a
first run of each command warms it. The load average is printed before and after: the machine
may be shared, and wall time then says more about the neighbours than CPU time does.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def split(journal: str, engine: str, spawned: float) -> None:
    """The child of ``--split``: one JSON line of (wall, CPU) per part."""
    jvm: Any = lambda: 0.0  # noqa: E731  (the JVM's CPU, once there is one)
    import numpy  # noqa: F401
    import pandas  # noqa: F401

    import ha.cli  # noqa: F401  (what `ha report` loads before its first stage)

    if engine == "local":
        import pyarrow.compute  # noqa: F401
        import pyarrow.json  # noqa: F401

        from ha.report.local import analyze_local
    else:
        from pipeline_report import jvm_cpu_seconds

        from ha.report.analysis import analyze
        from ha.report.session import report_session, report_settings

        session = report_session(report_settings("local[2]", "2g"), quiet=True)
        jvm = jvm_cpu_seconds(session)
    from ha.report.render import render_html

    marks = [(time.time() - spawned, own_cpu() + jvm())]
    if engine == "local":
        report = analyze_local([journal])
    else:
        report = analyze(session, [journal])
    marks.append((time.time() - spawned, own_cpu() + jvm()))
    render_html(report)
    marks.append((time.time() - spawned, own_cpu() + jvm()))
    parts = [
        marks[0],
        *((b[0] - a[0], b[1] - a[1]) for a, b in zip(marks, marks[1:], strict=False)),
    ]
    print(json.dumps(parts))
    if engine == "spark":
        session.stop()


def child_env(pycache: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(pycache)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def adopt_orphans() -> None:
    """Become the subreaper of our descendants (Linux): the JVM that ``ha report`` leaves to
    exit after it is then reaped here, and its CPU counted in RUSAGE_CHILDREN."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(36, 1, 0, 0, 0) != 0:  # PR_SET_CHILD_SUBREAPER
        print("cannot become a subreaper: the Spark command's CPU misses its JVM's")


def reap_orphans(timeout: float = 120.0) -> None:
    """Wait for the descendants left behind (a JVM exits soon after its Python parent)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            time.sleep(0.1)


def command(journal: Path, engine: str, out: Path, env: dict[str, str]) -> tuple[float, float]:
    """``ha report`` through the real command: wall and CPU seconds (its own, and its
    descendants', the JVM included)."""
    started, cpu = time.perf_counter(), children_cpu()
    argv = [sys.executable, "-m", "ha", "report", str(journal), "--out", str(out)]
    done = subprocess.run(
        [*argv, "--engine", engine], env=env, cwd=ROOT, capture_output=True, text=True
    )
    wall = time.perf_counter() - started
    reap_orphans()
    if done.returncode != 0:
        raise SystemExit(f"ha report failed ({done.returncode}): {done.stderr.strip()}")
    if f"{engine} engine)" not in done.stdout:
        raise SystemExit(f"ha report did not use the {engine} engine: {done.stdout.strip()}")
    return wall, children_cpu() - cpu


def parts(journal: Path, engine: str, env: dict[str, str]) -> list[tuple[float, float]]:
    """The split, in a fresh process: import, analysis, charts (wall and CPU each)."""
    argv = [sys.executable, __file__, "--split", str(journal), "--engine", engine]
    done = subprocess.run(
        [*argv, "--spawned", repr(time.time())], env=env, cwd=ROOT, capture_output=True,
        text=True, check=True,
    )  # fmt: skip
    reap_orphans()
    return [(float(w), float(c)) for w, c in json.loads(done.stdout.strip().splitlines()[-1])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", default="1000,10000,100000", help="comma-separated sizes")
    parser.add_argument("--runs", type=int, default=3, help="runs of the local command (best)")
    parser.add_argument("--spark-up-to", type=int, default=10_000, help="0: no Spark rows")
    parser.add_argument("--keep", help="generate into (or reuse) this directory")
    parser.add_argument("--split", metavar="JOURNAL", help=argparse.SUPPRESS)
    parser.add_argument("--engine", default="local", help=argparse.SUPPRESS)
    parser.add_argument("--spawned", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.split:
        split(args.split, args.engine, args.spawned)
        return
    from ha.report.synthetic import generate_journal

    adopt_orphans()
    sizes = [int(n) for n in args.events.split(",")]
    workdir = Path(args.keep or tempfile.mkdtemp(prefix="ha-report-small-"))
    pycache = Path(tempfile.mkdtemp(prefix="ha-report-pycache-"))
    env = child_env(pycache)
    load_before = os.getloadavg()
    rows = []
    try:
        for size in sizes:
            journal = workdir / f"journal-{size}"
            if not journal.exists():
                generate_journal(journal, events=size, elections=3, seed=1)
            out = workdir / f"report-{size}.html"
            engines = ["local"] + (["spark"] if size <= args.spark_up_to else [])
            for engine in engines:
                runs = args.runs if engine == "local" else 1
                command(journal, engine, out, env)  # warms the bytecode and the page cache
                best = min(command(journal, engine, out, env) for _ in range(runs))
                rows.append((size, engine, best, parts(journal, engine, env)))
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
        shutil.rmtree(pycache, ignore_errors=True)
    load_after = os.getloadavg()

    print(
        f"\n`ha report` through the command, {os.cpu_count()} CPUs; wall / CPU seconds"
        " (split: each part in a fresh process)"
    )
    print(
        f"{'events':>8} {'engine':<6} {'wall':>6} {'CPU':>6} {'import':>13} {'analysis':>13}"
        f" {'charts':>13} {'vs Spark':>9}"
    )
    spark = {size: best for size, engine, best, _ in rows if engine == "spark"}
    for size, engine, (wall, cpu), split_parts in rows:
        ratio = "-"
        if engine == "local" and size in spark:
            ratio = f"{spark[size][0] / wall:.0f}x"
        cells = " ".join(f"{w:6.2f}/{c:<6.2f}" for w, c in split_parts)
        print(f"{size:>8,} {engine:<6} {wall:6.2f} {cpu:6.2f} {cells} {ratio:>9}")
    print("vs Spark: how many times faster than `--engine spark` on the same journal, wall")
    print(
        "load average (1, 5, 15 min): before "
        + " ".join(f"{x:.1f}" for x in load_before)
        + ", after "
        + " ".join(f"{x:.1f}" for x in load_after)
    )


if __name__ == "__main__":
    main()
