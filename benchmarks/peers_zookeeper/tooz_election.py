"""A contender on tooz's ZooKeeper driver (``kazoo://``).

tooz elections are polled: ``run_watchers()`` tries a non-blocking acquire of the group's
leader lock. This contender polls every ``POLL`` seconds, as a tooz service's main loop would.
"""

from __future__ import annotations

import logging
import time

from protocol import arguments, release_requested, say
from tooz import coordination

POLL = 0.05


def main() -> None:
    args = arguments()
    logging.basicConfig(level=logging.ERROR)
    release = release_requested()
    timeout = max(1, round(args.session_timeout))  # tooz takes whole seconds
    coord = coordination.get_coordinator(
        f"kazoo://{args.hosts}?timeout={timeout}&namespace={args.path}", args.id.encode()
    )
    coord.start(start_heart=True)
    group = b"bench"
    try:
        coord.create_group(group).get()
    except coordination.GroupAlreadyExist:
        pass
    coord.join_group(group).get()
    leading = False

    def elected(_event: object) -> None:
        nonlocal leading
        leading = True
        say("LEADER")

    coord.watch_elected_as_leader(group, elected)
    say("JOINED")
    while not (leading and release.is_set()):
        coord.run_watchers()
        time.sleep(POLL)
    say("RELEASING")
    coord.stand_down_group_leader(group)
    coord.stop()


if __name__ == "__main__":
    main()
