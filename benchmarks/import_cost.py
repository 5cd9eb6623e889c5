"""What a process of ``ha`` loads before it does anything: modules, resident memory, start time.

Each row runs in a fresh interpreter (this one's, with ``PYTHONPATH`` set to the tree measured)
and reports at its exit: the modules it holds (all, and ``ha``'s own), its resident set
(``VmRSS``), and the wall time of the whole process (start to exit, the interpreter's own start
included: the first row is that floor), median of ``--runs``.

- the floors: a bare interpreter; the imports of the etcd election API's contender in
  ``etcd_failover.py`` (``peers_etcd/election_api.py``: http.client, json, threads, no event
  loop); anyio running on asyncio, and on trio, with one worker thread (any contender on anyio,
  such as ``peers_etcd/ha_etcd.py``, has at least that);
- ``import ha``; the code of an etcd standby imported (``ha.Elector``, ``ha.Lease``,
  ``ha.connect`` and the etcd driver), and with its loop running (no server: a standby's
  connection and election add little beside these);
- the command: ``ha --help``, and ``ha run`` standing by on a real etcd (started here on
  loopback, when etcd is installed: its RSS read from ``/proc``, after ``--settle`` seconds).

``--trees`` compares checkouts (e.g. ``git archive <commit> ha | tar -x -C /tmp/old``)::

    .venv/bin/python benchmarks/import_cost.py [--runs 5] [--trees /tmp/old,.] [--no-etcd]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

REPORT = textwrap.dedent(
    """
    import atexit as _atexit, os as _os, sys as _sys

    def _report() -> None:
        with open("/proc/self/status") as status:
            rss = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
        ha = sum(1 for m in _sys.modules if m == "ha" or m.startswith("ha."))
        with open(_os.environ["IMPORT_COST_REPORT"], "w") as out:
            out.write(f"{len(_sys.modules)} {ha} {rss}")

    _atexit.register(_report)
    """
)

LOOP = """
import anyio, anyio.to_thread
async def _idle() -> None:
    await anyio.to_thread.run_sync(lambda: None)  # the worker thread, as a contender has
anyio.run(_idle, backend={backend!r})
"""

STANDBY_CODE = "import ha\nha.Elector, ha.Lease, ha.connect\nimport ha.drivers.etcd\n"

ROWS: tuple[tuple[str, str], ...] = (
    ("bare interpreter", "pass"),
    ("election API contender's imports", "import argparse, base64, http.client, json, threading"),
    ("anyio on asyncio, a worker thread", LOOP.format(backend="asyncio")),
    ("anyio on trio, a worker thread", LOOP.format(backend="trio")),
    ("import ha", "import ha"),
    ("etcd standby's code imported", STANDBY_CODE),
    ("  + its loop running (asyncio)", STANDBY_CODE + LOOP.format(backend="asyncio")),
    ("  + its loop running (trio)", STANDBY_CODE + LOOP.format(backend="trio")),
    ("ha --help", "import sys\nsys.argv = ['ha', '--help']\nfrom ha.cli import main\nmain()"),
)


def measure(tree: Path, code: str, runs: int) -> str:
    """``modules ha-modules RSS-MiB wall-ms`` of ``code`` (medians of ``runs``)."""
    samples: list[tuple[float, ...]] = []
    with tempfile.TemporaryDirectory(prefix="import-cost-") as tmp:
        report = Path(tmp) / "report"
        env = dict(os.environ, PYTHONPATH=str(tree), IMPORT_COST_REPORT=str(report))
        for _ in range(runs):
            start = time.perf_counter()
            done = subprocess.run(
                [sys.executable, "-c", REPORT + code],
                cwd=tmp,  # not the tree's parent: -c puts the working directory on sys.path
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
            wall = (time.perf_counter() - start) * 1000
            if done.returncode:
                return f"failed: {done.stderr.strip().splitlines()[-1]}"
            modules, ha, rss = (int(word) for word in report.read_text().split())
            samples.append((modules, ha, rss / 1024, wall))
    modules, ha, rss, wall = (statistics.median(column) for column in zip(*samples, strict=True))
    return f"{modules:7.0f} {ha:6.0f} {rss:8.1f} {wall:8.0f}"


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) / 1024 for line in status if line.startswith("VmRSS:"))


def ha_run_standby(trees: list[Path], settle: float) -> dict[Path, str]:
    """Per tree: RSS of ``ha run`` standing by on a real etcd (a leader beside it)."""
    sys.path.insert(0, str(ROOT))
    from tests.support.backends.etcd import EtcdServer, missing_reason

    reason = missing_reason()
    if reason:
        return {tree: f"not run: {reason}" for tree in trees}
    server = EtcdServer(timers=(100, 1000))
    server.start()
    found = {}
    try:
        for number, tree in enumerate(trees):
            url = f"etcd://{server.hosts}/import-cost-{number}"
            with tempfile.TemporaryDirectory(prefix="import-cost-") as tmp:
                env = dict(os.environ, PYTHONPATH=str(tree), HA_STATE_DIR=tmp)
                command = [sys.executable, "-m", "ha", "--url", url, "run", "/svc", "--id"]
                started = []
                try:
                    for identity in ("leader", "standby"):
                        started.append(
                            subprocess.Popen(
                                [*command, identity, "--", "sleep", "600"],
                                cwd=tmp,
                                env=env,
                                stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL,
                            )
                        )
                        time.sleep(settle)
                    found[tree] = f"{'-':>7} {'-':>6} {rss_mib(started[1].pid):8.1f} {'-':>8}"
                finally:
                    for process in reversed(started):
                        process.terminate()
                        try:
                            process.wait(10)
                        except subprocess.TimeoutExpired:
                            process.kill()
                            process.wait()
    finally:
        server.remove()
    return found


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--trees", default=str(ROOT), help="comma-separated source trees")
    parser.add_argument("--no-etcd", action="store_true", help="skip the ha run row")
    parser.add_argument("--settle", type=float, default=4.0, help="seconds before reading")
    args = parser.parse_args()
    trees = [Path(t).resolve() for t in args.trees.split(",") if t]
    missing = [str(t) for t in trees if not (t / "ha" / "__init__.py").is_file()]
    if missing:
        raise SystemExit(f"not a source tree of ha (no ha/__init__.py): {', '.join(missing)}")
    width = max(len(str(t)) for t in trees)
    print(f"{sys.executable} (Python {sys.version.split()[0]}), medians of {args.runs} runs")
    print(f"{'':36}{'tree':<{width}} {'modules':>7} {'of ha':>6} {'RSS MiB':>8} {'wall ms':>8}")
    for name, code in ROWS:
        for tree in trees:
            print(f"{name:36}{str(tree):<{width}} {measure(tree, code, args.runs)}", flush=True)
    if not args.no_etcd:
        for tree, row in ha_run_standby(trees, args.settle).items():
            print(f"{'ha run, standing by on etcd':36}{str(tree):<{width}} {row}")


if __name__ == "__main__":
    main()
