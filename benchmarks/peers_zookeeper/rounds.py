"""The failover benchmarks' rounds and their results, shared by zookeeper_failover.py and
etcd_failover.py: interleaved rounds over the kinds' ``Election``s (``contenders.py``).
"""

from __future__ import annotations

import sys
from collections.abc import Collection
from dataclasses import dataclass, field

from contenders import Election


@dataclass
class Results:
    graceful: list[float] = field(default_factory=list)
    crash: list[float] = field(default_factory=list)
    seen: list[float] = field(default_factory=list)
    failed: str | None = None
    watched: set[str] = field(default_factory=set)


def percentile(values: list[float], share: float) -> float:
    """Nearest rank: the smallest value with at least ``share`` of the values at or below it."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * share // 1))
    return ordered[int(rank) - 1]


def run_rounds(
    elections: dict[str, Election],
    rounds: int,
    results: dict[str, Results],
    graceful_only: Collection[str] = (),
) -> None:
    """Round r of every kind, then round r + 1; a kind that fails is dropped with the reason.
    A round is a graceful handover of every kind, then a crash of every kind not in
    ``graceful_only``; the order of the kinds rotates each round."""
    for number in range(rounds):
        order = list(elections)
        order = order[number % len(order) :] + order[: number % len(order)]
        for phase in ("graceful", "crash"):
            for key in order:
                election, result = elections.get(key), results[key]
                if election is None or (phase == "crash" and key in graceful_only):
                    continue
                try:
                    if phase == "graceful":
                        result.graceful.append(election.graceful_round())
                    else:
                        killed_to_leader, seen_to_leader = election.crash_round()
                        result.crash.append(killed_to_leader)
                        if seen_to_leader is not None:
                            result.seen.append(seen_to_leader)
                        result.watched |= election.watched
                except Exception as exc:  # one kind's failure must not end the others' run
                    result.failed = f"failed in round {number + 1} ({phase}): {exc}"[:300]
                    print(f"{key}: {result.failed}", file=sys.stderr)
                    elections.pop(key).close()
        print(f"round {number + 1}/{rounds} done", file=sys.stderr)
