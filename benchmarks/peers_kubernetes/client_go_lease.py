"""A contender on the official ``kubernetes`` client's ``LeaderElection`` with a ``LeaseLock``.

That is client-go's algorithm in Python: candidates poll the Lease every retry period; one
whose record has not changed for the lease duration, counted from its own observation,
takes it with a compare-and-set (the Lease's resourceVersion). There is no watch and no
release: stepping down is exiting, and the next leader comes once the Lease has run out.
Timing as its users set it: lease ``--session-timeout`` (2 s), renew deadline 3/4 of it,
retry period 1 s (the client refuses less).

The line protocol is ``peers_zookeeper/protocol.py``'s. ``--hosts`` is the namespace; the API
server comes from ``$KUBECONFIG``. The Lease is named after the election's last path component.
"""

from __future__ import annotations

import logging
import os
import sys
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "peers_zookeeper"))

from kubernetes import config  # noqa: E402
from kubernetes.leaderelection import electionconfig, leaderelection  # noqa: E402
from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock  # noqa: E402
from protocol import arguments, release_requested, say  # noqa: E402

RETRY_PERIOD = 1.0


def main() -> None:
    args = arguments()
    release = release_requested()
    config.load_kube_config()
    lock = LeaseLock("b" + args.path.rstrip("/").rsplit("/", 1)[-1], args.hosts, args.id)
    lease = max(2, round(args.session_timeout))  # a Lease counts whole seconds
    election = electionconfig.Config(
        lock,
        lease_duration=lease,
        renew_deadline=lease * 0.75,
        retry_period=RETRY_PERIOD,
        onstarted_leading=lambda: say("LEADER"),
        onstopped_leading=lambda: None,
    )
    threading.Thread(target=leaderelection.LeaderElection(election).run, daemon=True).start()
    say("JOINED")
    release.wait()
    say("RELEASING")
    os._exit(0)  # no release in this algorithm: the Lease runs out


if __name__ == "__main__":
    logging.basicConfig(level=logging.ERROR)
    main()
