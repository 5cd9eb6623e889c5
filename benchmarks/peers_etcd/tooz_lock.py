"""A contender on tooz's etcd driver (``etcd3+http://``, etcd3gw over the JSON gateway).

tooz's etcd driver has no election (``watch_elected_as_leader`` raises NotImplemented), so a
tooz service on etcd leads by holding a lock: ``acquire(blocking=True)`` retries tooz's
create-if-absent transaction with tenacity's exponential wait (capped at 1 s); each try grants
a lease of ``lock_timeout`` seconds. The lock key is ``/tooz/locks`` + the election path.
tooz's own heart beats every ``timeout`` seconds, which would let a lease of that TTL lapse,
so this contender calls ``heartbeat()`` every third of it instead (tooz's documented
alternative to ``start_heart``). Runs in its own virtualenv (``etcd_failover.py --peers-python``).
"""

from __future__ import annotations

import logging
import math
import os
import sys
import threading

sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "peers_zookeeper")
)

from protocol import arguments, release_requested, say  # noqa: E402
from tooz import coordination  # noqa: E402


def main() -> None:
    args = arguments()
    logging.basicConfig(level=logging.ERROR)
    release = release_requested()
    ttl = max(1, math.ceil(args.session_timeout))  # whole seconds
    host = args.hosts.split(",")[0]
    coord = coordination.get_coordinator(f"etcd3+http://{host}?timeout={ttl}", args.id.encode())
    coord.start(start_heart=False)
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(ttl / 3):
            coord.heartbeat()

    threading.Thread(target=beat, daemon=True).start()
    lock = coord.get_lock(args.path.encode())
    say("JOINED")
    lock.acquire(blocking=True)
    say("LEADER")
    release.wait()
    say("RELEASING")
    lock.release()
    stop.set()
    coord.stop()


if __name__ == "__main__":
    main()
