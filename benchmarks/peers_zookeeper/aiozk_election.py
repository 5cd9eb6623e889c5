"""A contender on aiozk's ``LeaderElection`` recipe (asyncio; the lowest sequential node leads).

aiozk speaks ZooKeeper's protocol from the event loop itself (no client thread), so it shows
what a handover costs without crossings between threads. Stepping down is ``resign()``, which
deletes the contender's node; the next in line is watching it.
"""

from __future__ import annotations

import asyncio
import logging

from aiozk import ZKClient
from protocol import arguments, release_requested, say


async def main() -> None:
    args = arguments()
    release = release_requested()
    client = ZKClient(args.hosts, session_timeout=args.session_timeout)
    await client.start()
    election = client.recipes.LeaderElection(args.path)
    await election.volunteer()  # its node exists once this returns
    say("JOINED")
    await election.wait_for_leadership()
    say("LEADER")
    await asyncio.to_thread(release.wait)
    say("RELEASING")
    await election.resign()
    await client.close()


if __name__ == "__main__":
    logging.basicConfig(level=logging.ERROR)
    asyncio.run(main())
