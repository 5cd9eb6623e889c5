"""python -m tests.chaos --backend sqlite --seed 1234 --rounds 1 [--loop trio] [--keep DIR]

--supervised: ``ha run`` rounds judged by the COMMANDs' heartbeats (tests/chaos/supervised.py)
on --backend sqlite, zookeeper, etcd, kubernetes or all of them."""

from __future__ import annotations

import argparse
import functools
import sys
import tempfile
import time
from pathlib import Path

import anyio

from tests.chaos import SUPERVISED, RoundResult, table
from tests.chaos.runner import BACKENDS, run_backend, server_missing
from tests.chaos.supervised import KINDS


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos", description=__doc__)
    parser.add_argument("--backend", choices=[*BACKENDS, "all"], default="all")
    parser.add_argument(
        "--supervised",
        action="store_true",
        help=f"ha run attacked itself, on {', '.join(KINDS)} (or all of them)",
    )
    parser.add_argument("--seed", type=int, default=0, help="round i runs seed SEED+i")
    parser.add_argument("--rounds", type=int, default=1, help="rounds per backend")
    parser.add_argument("--loop", choices=["asyncio", "trio"], default="asyncio")
    parser.add_argument("--keep", type=Path, help="keep witness files and logs in this directory")
    args = parser.parse_args()
    backends: tuple[str, ...] = BACKENDS if args.backend == "all" else (args.backend,)
    if args.supervised:
        if args.backend not in (*KINDS, "all"):
            parser.error(f"--supervised runs on {', '.join(KINDS)} or all, not {args.backend}")
        backends = tuple(
            f"{SUPERVISED}{kind}" for kind in (KINDS if args.backend == "all" else backends)
        )
    workdir = args.keep or Path(tempfile.mkdtemp(prefix="ha-chaos-"))
    workdir.mkdir(parents=True, exist_ok=True)
    seeds = list(range(args.seed, args.seed + args.rounds))
    started = time.monotonic()
    results: list[RoundResult] = []

    def say(r: RoundResult) -> None:
        mark = "ok" if not r.violations else f"{len(r.violations)} VIOLATIONS"
        print(
            f"{r.backend} seed {r.seed} {r.loop}: {mark} ({r.seconds:.1f}s, {r.figures.acts} acts)",
            flush=True,
        )
        if r.violations:
            print(r.report(), flush=True)

    for backend in backends:
        if reason := server_missing(backend):
            print(f"{backend}: skipped ({reason})")
            continue
        results += anyio.run(
            functools.partial(run_backend, backend, seeds, args.loop, workdir, say),
            backend=args.loop,
        )
    print(table(results, time.monotonic() - started))
    bad = [r for r in results if r.violations]
    if bad:
        print(f"logs and witness files: {workdir}")
        for r in bad:
            print(f"replay: {r.replay()}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
