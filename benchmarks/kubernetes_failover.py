"""Leader failover on Kubernetes, side by side: graceful handover and crash failover.

No real kube-apiserver can run on these machines: every kind runs against the same FAKE API
server (``tests/support/kubeapi``, a process of its own on loopback with the API server's
semantics for Leases and ConfigMaps), started here, in the same run. Three contender processes
per kind join one election, speak the line protocol of ``peers_zookeeper/protocol.py``, and
``peers_zookeeper/contenders.py`` runs them; ``peers_zookeeper/rounds.py`` interleaves the
rounds across kinds (the order rotates each round). A round is one graceful handover of every
kind, then one crash (SIGKILL of the leader) of every kind. Lease / session 2 s.

- graceful: the next leader's ``LEADER`` minus the old leader's ``RELEASING``;
- crash, kill -> leader: the next ``LEADER`` minus the kill;
- crash, contact -> leader (``ha`` only): the next ``LEADER`` minus the dead holder's last
  contact (the send time of its last successful renewal, which its contender prints): the
  time the others waited past the holder's own view of its lease, never below the lease if
  expiry is safe.

Kinds: ``ha`` on asyncio and on trio (``peers_kubernetes/ha_kubernetes.py``), and the official
``kubernetes`` client's ``LeaderElection`` with a ``LeaseLock`` (``client_go_lease.py``: the
client-go algorithm, polling every retry period of 1 s, renew deadline 1.5 s, no release), the
reference of the ratios.

    .venv/bin/python benchmarks/kubernetes_failover.py [--rounds 30] [--kinds ha,ha-trio,client-go]
    .venv/bin/python benchmarks/kubernetes_failover.py --quick      # a smoke run: 3 rounds
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
PEERS = HERE / "peers_kubernetes"
ROOT = HERE.parent
sys.path.insert(0, str(HERE / "peers_zookeeper"))
sys.path.insert(0, str(ROOT))

import contenders  # noqa: E402
from rounds import Results, percentile, run_rounds  # noqa: E402

from tests.support.backends.kubernetes import write_kubeconfig  # noqa: E402
from tests.support.kubeapi.process import FakeKubeApi  # noqa: E402

NAMESPACE = "bench"
KINDS = {
    "ha": ("ha (asyncio)", [sys.executable, str(PEERS / "ha_kubernetes.py")]),
    "ha-trio": (
        "ha (trio)",
        [sys.executable, str(PEERS / "ha_kubernetes.py"), "--backend", "trio"],
    ),
    "client-go": ("kubernetes LeaseLock", [sys.executable, str(PEERS / "client_go_lease.py")]),
}
PEER = "client-go"
HA_STEP = 1 / 8  # ha's drivers list the session Leases every eighth of a lease (liveness.py)


@dataclass
class Election(contenders.Election):
    """``contenders.Election`` that also reads ``CONTACT`` lines: each contender's last contact."""

    contacts: dict[str, int] = field(default_factory=dict)
    after_contact: list[float] = field(default_factory=list)
    unasked: int = 0  # leaders elected between rounds (a lease lost under load)
    _dead: str | None = None
    _elected: int | None = None

    def next_line(self, timeout: float = contenders.SETTLE_TIMEOUT) -> tuple[str, str, int]:
        name, word, stamp = super().next_line(timeout)
        if word == "CONTACT":
            self.contacts[name] = stamp
        elif word == "LEADER" and self._dead not in (None, name) and self._elected is None:
            self._elected = stamp
        return name, word, stamp

    def _catch_up(self) -> None:
        """Read the lines that came since the last round: a round must start from the leader
        of now (on a loaded machine a lease may be lost between rounds), never a stale one."""
        before = self.leader
        while not self.lines.empty():
            self.next_line(0.1)
        if self.leader != before:
            self.unasked += 1

    def graceful_round(self) -> float:
        self._catch_up()
        return super().graceful_round()

    def crash_round(self) -> tuple[float, float | None]:
        self._catch_up()
        self._dead, self._elected = self.leader, None
        try:
            result = super().crash_round()
        finally:
            dead, self._dead = self._dead, None
        contact = self.contacts.pop(dead or "", None)
        if contact is not None and self._elected is not None:
            self.after_contact.append((self._elected - contact) / 1e6)
        return result


def cells(values: list[float], reference: list[float], digits: int) -> str:
    if not values:
        return f"{'-':>7} {'-':>7} {'-':>7} {'-':>7} {'':>7}"
    p50, p90 = percentile(values, 0.5), percentile(values, 0.9)
    ratio = f"{p50 / percentile(reference, 0.5):.3f}x" if reference else "-"
    low, high = min(values), max(values)
    return f"{p50:7.{digits}f} {p90:7.{digits}f} {low:7.{digits}f} {high:7.{digits}f} {ratio:>7}"


def table(results: dict[str, Results], elections: dict[str, Election]) -> None:
    peer = results.get(PEER, Results())
    print(f"{'':<22}{'graceful handover':^40}{'crash: kill -> leader':^40}", end="")
    print(f"{'crash: contact -> leader':^40}")
    print(f"{'contender':<22}" + f"{'p50':>7} {'p90':>7} {'min':>7} {'max':>7} {'x peer':>7} " * 3)
    for key, result in results.items():
        after = elections[key].after_contact if key in elections else []
        row = f"{KINDS[key][0]:<22}{cells(result.graceful, peer.graceful, 1)} "
        row += f"{cells(result.crash, peer.crash, 0)} {cells(after, [], 0)}"
        print(row)
        if elections.get(key) and elections[key].unasked:
            print(f"{'':<22}leader changed unasked between rounds {elections[key].unasked} times")
        if result.failed:
            print(f"{'':<22}samples {len(result.graceful)}/{len(result.crash)} {result.failed}")


def verdicts(results: dict[str, Results], elections: dict[str, Election], lease: float) -> None:
    step = lease * HA_STEP
    bound = (lease + step + 0.1) * 1000
    for key in ("ha", "ha-trio"):
        result = results.get(key)
        if result is None or not result.graceful or not result.crash:
            continue
        graceful, crash = percentile(result.graceful, 0.5), percentile(result.crash, 0.9)
        after = elections[key].after_contact if key in elections else []
        print(
            f"{key}: graceful p50 {graceful:.1f} ms (target < 50 ms: "
            f"{'met' if graceful < 50 else 'NOT met'}); crash p90 {crash:.0f} ms (target <= lease"
            f" {lease:g} s + one observation step {step:g} s + 100 ms = {bound:.0f} ms: "
            f"{'met' if crash <= bound else 'NOT met'})"
        )
        if after:
            low = min(after)
            print(
                f"{key}: contact -> leader min {low:.0f} ms (target: never below the lease,"
                f" {lease * 1000:.0f} ms: {'met' if low >= lease * 1000 else 'NOT met'})"
            )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--quick", action="store_true", help="a smoke run: 3 rounds")
    parser.add_argument("--kinds", default=",".join(KINDS), help="comma-separated")
    parser.add_argument("--session-timeout", type=float, default=2.0)
    args = parser.parse_args()
    if args.quick:
        args.rounds = 3
    chosen = [k.strip() for k in args.kinds.split(",") if k.strip()]
    unknown = set(chosen) - set(KINDS)
    if unknown:
        raise SystemExit(f"unknown kinds {sorted(unknown)}; known: {', '.join(KINDS)}")

    load_before = os.getloadavg()
    started = time.monotonic()
    results: dict[str, Results] = {}
    elections: dict[str, Election] = {}
    with tempfile.TemporaryDirectory(prefix="kubernetes-failover-") as tmp:
        server = FakeKubeApi(Path(tmp) / "kubeapi")
        server.start()
        try:
            server.create_namespace(NAMESPACE)
            config = write_kubeconfig(Path(tmp), server.url, NAMESPACE)
            for key in chosen:
                election = Election(
                    KINDS[key][1],
                    NAMESPACE,  # the contenders' --hosts: the API server is in $KUBECONFIG
                    args.session_timeout,
                    Path(tmp) / f"{key}.log",
                    None,  # type: ignore[arg-type]  # no queue to watch: nothing asks the observer
                    (),
                    {"KUBECONFIG": str(config)},
                )
                elections[key] = election
                results[key] = Results()
                election.start()
            print(f"{len(elections)} kinds settled; {args.rounds} rounds...", file=sys.stderr)
            run_rounds(dict(elections), args.rounds, results)
        finally:
            for election in elections.values():
                election.close()
            server.remove()

    minutes = (time.monotonic() - started) / 60
    print(
        f"\nKubernetes failover on the FAKE API server (tests/support/kubeapi), 3 contender"
        f" processes per kind, lease {args.session_timeout:g} s, {args.rounds} interleaved"
        f" rounds, ms (x peer: p50 ratio to the kubernetes client's LeaseLock)"
    )
    table(results, elections)
    verdicts(results, elections, args.session_timeout)
    load_after = os.getloadavg()
    print(
        f"{os.cpu_count()} CPUs; load average (1/5/15 min) {'/'.join(f'{x:.2f}' for x in load_before)}"
        f" before, {'/'.join(f'{x:.2f}' for x in load_after)} after; {minutes:.1f} min"
    )


if __name__ == "__main__":
    main()
