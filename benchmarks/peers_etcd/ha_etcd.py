"""A contender on ``ha``: an ``Elector`` on the etcd driver, under anyio (asyncio by default).

The line protocol is ``peers_zookeeper/protocol.py``'s; ``--hosts`` is etcd's client address.
Stepping down is ``elector.quit()`` (the breadcrumb is removed, so no one needs fencing).
``--backend trio`` runs it under trio. ``HA_ROOT`` names the tree ``ha`` is imported from.
"""

from __future__ import annotations

import logging
import os
import sys

import anyio

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "peers_zookeeper"))
sys.path.insert(0, os.environ.get("HA_ROOT") or os.path.join(HERE, "..", ".."))

from protocol import arguments, release_requested, say  # noqa: E402

import ha  # noqa: E402

PREFIX = "/hab"  # the driver's key prefix; etcd_failover.py's observer looks under it


class Contender:
    async def become_active(self, lease: ha.Lease) -> None:
        say("LEADER")


async def main(hosts: str, path: str, identity: str, session_timeout: float) -> None:
    release = release_requested()
    url = f"etcd://{hosts}{PREFIX}?session_timeout={session_timeout}"
    async with ha.connect(url) as driver:
        elector = ha.Elector(driver, path, identity)
        async with anyio.create_task_group() as tg:
            await tg.start(elector.run, Contender())
            say("JOINED")
            await anyio.to_thread.run_sync(release.wait, abandon_on_cancel=True)
            say("RELEASING")
            elector.quit()


if __name__ == "__main__":
    backend = "asyncio"
    if "--backend" in sys.argv:
        index = sys.argv.index("--backend")
        backend = sys.argv[index + 1]
        del sys.argv[index : index + 2]
    logging.basicConfig(level=logging.ERROR)
    args = arguments()
    anyio.run(main, args.hosts, args.path, args.id, args.session_timeout, backend=backend)
