"""A contender on ``ha``: an ``Elector`` on the ZooKeeper driver, under anyio (asyncio by default).

Stepping down is ``elector.quit()`` (no fencing needed: the breadcrumb is removed).
``--backend trio`` runs it under trio. ``HA_ROOT`` names the tree ``ha`` is imported from
(default: this repository), so one run can set a commit's ``ha`` beside the working tree's.
"""

from __future__ import annotations

import logging
import os
import sys

import anyio

REPOSITORY = os.path.join(os.path.dirname(__file__), "..", "..")
sys.path.insert(0, os.environ.get("HA_ROOT") or REPOSITORY)

from protocol import arguments, release_requested, say  # noqa: E402

import ha  # noqa: E402


class Contender:
    async def become_active(self, lease: ha.Lease) -> None:
        say("LEADER")


async def main(hosts: str, path: str, identity: str, session_timeout: float) -> None:
    release = release_requested()
    async with ha.connect(f"zk://{hosts}?session_timeout={session_timeout}") as driver:
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
