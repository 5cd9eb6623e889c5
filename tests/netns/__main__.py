"""python -m tests.netns --backend etcd --seed 7 --rounds 1 [--loop trio] [--keep DIR]

Network rounds (tests/netns): servers and contenders on hosts of their own, packet-level
faults, judged from outside. Needs root (network namespaces, nftables)."""

from __future__ import annotations

import argparse
import functools
import sys
import tempfile
import time
from pathlib import Path

import anyio

from tests.chaos import RoundResult, table
from tests.netns import BACKENDS, missing, run_rounds


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.netns", description=__doc__)
    parser.add_argument("--backend", choices=[*BACKENDS, "all"], default="all")
    parser.add_argument("--seed", type=int, default=0, help="round i runs seed SEED+i")
    parser.add_argument("--rounds", type=int, default=1, help="rounds per backend")
    parser.add_argument("--loop", choices=["asyncio", "trio"], default="asyncio")
    parser.add_argument("--keep", type=Path, help="keep witness files and logs in this directory")
    parser.add_argument("--verbose", action="store_true", help="every round's report")
    parser.add_argument(
        "--supervised",
        action="store_true",
        help="ha run rounds judged by their COMMANDs' heartbeats (tests/chaos/supervised.py)",
    )
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    backends = BACKENDS if args.backend == "all" else (args.backend,)
    workdir = args.keep or Path(tempfile.mkdtemp(prefix="ha-netns-"))
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
        if r.violations or args.verbose:
            print(r.report(), flush=True)

    for backend in backends:
        if reason := missing(backend):
            print(f"{backend}: skipped ({reason})")
            continue
        results += anyio.run(
            functools.partial(run_rounds, backend, seeds, args.loop, workdir, say, args.supervised),
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
