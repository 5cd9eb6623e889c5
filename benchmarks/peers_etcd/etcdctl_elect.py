"""A contender on ``etcdctl elect`` (etcd's Go ``concurrency.Election``), through a small wrapper.

``etcdctl elect NAME PROPOSAL`` campaigns and prints the leader key when it wins; on SIGINT it
resigns (its session is closed, which revokes the lease) and exits. The wrapper speaks the
harness's line protocol: ``LEADER`` when etcdctl's first line arrives (a pipe read later),
``RELEASING`` just before the SIGINT. etcdctl's session TTL is fixed at 60 s, so only graceful
handovers are measured (a crash would take a minute). etcdctl dies with the wrapper
(PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "peers_zookeeper"))
sys.path.insert(0, os.environ.get("HA_ROOT") or os.path.join(HERE, "..", ".."))

from protocol import arguments, release_requested, say  # noqa: E402

from ha._process import deathsig_preexec  # noqa: E402


def main() -> None:
    args = arguments()
    release = release_requested()
    command = ["etcdctl", f"--endpoints={args.hosts}", "elect", args.path, args.id]
    etcdctl = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "ETCDCTL_API": "3"},
        preexec_fn=deathsig_preexec(),
    )
    assert etcdctl.stdout is not None
    say("JOINED")
    if not etcdctl.stdout.readline():  # the leader key, once elected
        raise SystemExit(f"etcdctl elect exited with {etcdctl.wait()}")
    say("LEADER")
    release.wait()
    say("RELEASING")
    etcdctl.send_signal(signal.SIGINT)
    etcdctl.wait(timeout=30)


if __name__ == "__main__":
    main()
