"""python -m tests.netns --backend etcd --seed 7 --rounds 1 [--loop trio] [--keep DIR]

Network rounds (tests/netns): servers and contenders on hosts of their own, packet-level
faults, judged from outside. Needs root (network namespaces, nftables)."""

from __future__ import annotations

import argparse
import functools
import sys

from tests.chaos.reporting import add_round_options, run_and_report
from tests.netns import BACKENDS, missing, run_rounds


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.netns", description=__doc__)
    parser.add_argument("--backend", choices=[*BACKENDS, "all"], default="all")
    add_round_options(parser)
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
    rounds = functools.partial(run_rounds, supervised=args.supervised)
    return run_and_report(args, backends, missing, rounds, "ha-netns-", verbose=args.verbose)


if __name__ == "__main__":
    sys.exit(main())
