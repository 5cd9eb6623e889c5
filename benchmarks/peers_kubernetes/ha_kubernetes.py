"""A contender on ``ha``: an ``Elector`` on the Kubernetes driver, under anyio (asyncio by default).

The line protocol is ``peers_zookeeper/protocol.py``'s. ``--hosts`` is the namespace; the API
server and credentials come from ``$KUBECONFIG`` (the benchmark writes one for its FAKE API
server). The election's last path component names the ``ha`` root (ConfigMap ``NAME-ha``,
Leases ``NAME-ha-s-*``). Stepping down is ``elector.quit()``: the leaver deletes its breadcrumb
and its queue node in one write, and the next in the queue leads on the watch event.
``--backend trio`` runs it under trio. ``HA_ROOT`` names the tree ``ha`` is imported from.
"""

from __future__ import annotations

import logging
import os
import sys
import time

import anyio

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "peers_zookeeper"))
sys.path.insert(0, os.environ.get("HA_ROOT") or os.path.join(HERE, "..", ".."))

from protocol import arguments, release_requested, say  # noqa: E402

import ha  # noqa: E402
from ha.drivers.base import Driver  # noqa: E402


async def report_contact(driver: Driver, stop: anyio.Event) -> None:
    """``CONTACT <ns>`` at each new ``last_contact`` (the send time of the last successful
    renewal), on the protocol's clock: the harness times a crash from the dead holder's view."""
    last = None
    while not stop.is_set():
        contact = driver.last_contact
        if contact != last:
            last = contact
            ago = anyio.current_time() - contact  # trio's clock has an offset of its own
            print(f"CONTACT {time.monotonic_ns() - int(ago * 1e9)}", flush=True)
        with anyio.move_on_after(0.02):
            await stop.wait()


class Contender:
    async def become_active(self, lease: ha.Lease) -> None:
        say("LEADER")


async def main(namespace: str, path: str, identity: str, session_timeout: float) -> None:
    release = release_requested()
    root = "b" + path.rstrip("/").rsplit("/", 1)[-1]
    url = f"k8s://{namespace}/{root}?session_timeout={session_timeout}"
    async with ha.connect(url) as driver:
        elector = ha.Elector(driver, "/svc", identity)
        async with anyio.create_task_group() as tg:
            stop = anyio.Event()
            tg.start_soon(report_contact, driver, stop)
            await tg.start(elector.run, Contender())
            say("JOINED")
            await anyio.to_thread.run_sync(release.wait, abandon_on_cancel=True)
            say("RELEASING")
            elector.quit()
            stop.set()


if __name__ == "__main__":
    backend = "asyncio"
    if "--backend" in sys.argv:
        index = sys.argv.index("--backend")
        backend = sys.argv[index + 1]
        del sys.argv[index : index + 2]
    logging.basicConfig(level=logging.ERROR)
    args = arguments()
    anyio.run(main, args.hosts, args.path, args.id, args.session_timeout, backend=backend)
