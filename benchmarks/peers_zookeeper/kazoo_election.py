"""A contender on kazoo's ``Election`` recipe (a lock: the lowest sequential node leads)."""

from __future__ import annotations

import logging

from kazoo.client import KazooClient
from protocol import arguments, release_requested, say


def main() -> None:
    args = arguments()
    logging.basicConfig(level=logging.ERROR)
    release = release_requested()
    client = KazooClient(hosts=args.hosts, timeout=args.session_timeout)
    client.start(timeout=30)
    election = client.Election(args.path, args.id)

    def lead() -> None:
        say("LEADER")
        release.wait()
        say("RELEASING")  # returning releases the lock node

    say("JOINED")
    election.run(lead)
    client.stop()
    client.close()


if __name__ == "__main__":
    main()
