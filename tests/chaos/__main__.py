"""python -m tests.chaos --backend sqlite --seed 1234 --rounds 1 [--loop trio] [--keep DIR]

--supervised: ``ha run`` rounds judged by the COMMANDs' heartbeats (tests/chaos/supervised.py)
on --backend sqlite, zookeeper, etcd, kubernetes or all of them."""

from __future__ import annotations

import argparse
import sys

from tests.chaos import SUPERVISED
from tests.chaos.reporting import add_round_options, run_and_report
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
    add_round_options(parser)
    args = parser.parse_args()
    backends: tuple[str, ...] = BACKENDS if args.backend == "all" else (args.backend,)
    if args.supervised:
        if args.backend not in (*KINDS, "all"):
            parser.error(f"--supervised runs on {', '.join(KINDS)} or all, not {args.backend}")
        backends = tuple(
            f"{SUPERVISED}{kind}" for kind in (KINDS if args.backend == "all" else backends)
        )
    return run_and_report(args, backends, server_missing, run_backend, "ha-chaos-")


if __name__ == "__main__":
    sys.exit(main())
