"""The floor of protocol 2 on kazoo: its handover with nothing else (no ``ha`` code).

The same requests and watches as ``ha``'s graceful handover on ZooKeeper, made with plain
kazoo calls and no loop, machine, fencing or records, to show how fast any kazoo-based client
of this protocol can be:

- join: one transaction creates a breadcrumb ``PATH/b/ID`` and an ephemeral sequential node
  ``PATH/n/ID_``; then the queue is listed once;
- the node just below ours is watched (an exists watch); when it was the first of the queue,
  its deletion makes us the leader with no further request (``ha`` also checks the breadcrumb
  there, to know whether to fence: the floor fences nobody); otherwise the queue is listed again,
  by the main thread (kazoo's callbacks must not block);
- release: one transaction deletes our breadcrumb, then our node.

``LEADER`` is printed in kazoo's callback thread, where the watch lands: a client of kazoo
cannot act sooner. Not a library: a crash leaves its breadcrumb, which nobody fences.
"""

from __future__ import annotations

import logging
import threading

from kazoo.client import KazooClient
from kazoo.protocol.states import WatchedEvent
from protocol import arguments, release_requested, say


class Floor:
    def __init__(self, client: KazooClient, path: str, identity: str) -> None:
        self.client = client
        self.queue = f"{path}/n"
        self.crumb = f"{path}/b/{identity}"
        self.identity = identity
        self.node = ""
        self.led = threading.Event()
        self.wake = threading.Event()  # led, or the queue is to be listed again
        self.lock = threading.Lock()

    def join(self) -> None:
        self.client.ensure_path(self.queue)
        self.client.ensure_path(self.crumb.rsplit("/", 1)[0])
        tx = self.client.transaction()
        tx.create(self.crumb, self.identity.encode())
        tx.create(f"{self.queue}/{self.identity}_", ephemeral=True, sequence=True)
        self.node = tx.commit()[1].rsplit("/", 1)[1]
        self.place()

    def place(self) -> None:
        """List the queue; lead if first, else watch the node just below ours."""
        while True:
            names = sorted(self.client.get_children(self.queue), key=lambda n: n[-10:])
            mine = names.index(self.node)
            if mine == 0:
                self.lead()
                return
            below = names[mine - 1]
            first = mine == 1
            if self.client.exists(f"{self.queue}/{below}", watch=self.watcher(first)):
                return
            # gone between the listing and the watch: list again

    def watcher(self, first: bool):  # type: ignore[no-untyped-def]
        def fired(event: WatchedEvent) -> None:  # kazoo's callback thread
            if event.type != "DELETED":
                return
            if first:
                self.lead()
            else:
                self.wake.set()

        return fired

    def run(self) -> None:
        """List the queue again whenever asked, until we lead."""
        while True:
            self.wake.wait()
            self.wake.clear()
            if self.led.is_set():
                return
            self.place()

    def lead(self) -> None:
        with self.lock:
            if self.led.is_set():
                return
            self.led.set()
        say("LEADER")
        self.wake.set()

    def release(self) -> None:
        tx = self.client.transaction()
        tx.delete(self.crumb)
        tx.delete(f"{self.queue}/{self.node}")
        tx.commit()


def main() -> None:
    args = arguments()
    logging.basicConfig(level=logging.ERROR)
    release = release_requested()
    client = KazooClient(hosts=args.hosts, timeout=args.session_timeout)
    client.start(timeout=30)
    floor = Floor(client, args.path, args.id)
    floor.join()
    say("JOINED")
    floor.run()
    release.wait()
    say("RELEASING")
    floor.release()
    client.stop()
    client.close()


if __name__ == "__main__":
    main()
