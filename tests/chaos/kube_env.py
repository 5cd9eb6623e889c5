"""The Kubernetes backend of the process rounds: the FAKE API server (tests/support/kubeapi) and its faults.

No real kube-apiserver runs on these machines; the fake is a process of its own with the API
server's semantics for Leases and ConfigMaps, so it can be paused, killed and restarted like
one. Every contender process reaches it through a fault-proxy link of its own (a kubeconfig
per contender), so its network can fail alone. A fresh namespace per round. The faults:

- ``api_pause``: SIGSTOP the API server, SIGCONT later (every request hangs meanwhile);
- ``api_restart``: SIGKILL it, start it again later on its state file (objects and
  resourceVersions kept, the watch history lost, as after a control-plane restart);
- ``conflicts``: a storm of 409 Conflict on the next updates of the round's namespace (Lease
  renewals and tree writes alike): each must be read again and re-checked;
- ``watch_expiry``: the server forgets its history and ends every watch: each resumes from a
  version too old (410 Expired) and must re-list and diff;
- ``lease_taken``: another holder writes the acting contender's Lease (what a second
  client-go elector on the same name would do): its owner must notice at its next renewal;
- ``lease_deleted``: the acting contender's Lease is deleted, so its peers strike its session
  off at once. This breaks the timing assumption on purpose (the session ends before its
  duration), so the acts of that identity within one session timeout after it are excused
  (``witness.excused_acts``), as for etcd's revoke; its fenced writes are still judged;
- ``link_pause``: a contender's link goes silent both ways (its requests get no reply);
- ``link_drop``: a contender's connections close (it reconnects at once).
"""

from __future__ import annotations

import contextlib
import time
import uuid
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import anyio.to_thread

from tests.chaos import Fault
from tests.chaos.procs import SESSION, Fleet

ROOT = "chaos"  # the ha root in each round's namespace: ConfigMap chaos-ha, Leases chaos-ha-s-*
STORM = (10, 40)  # 409s in one conflict storm: fewest, most


class KubernetesEnv:
    kind = "kubernetes"
    kinds = (
        "api_pause",
        "api_restart",
        "conflicts",
        "watch_expiry",
        "lease_taken",
        "lease_deleted",
        "link_pause",
        "link_drop",
    )
    live_within = 8.0  # a restarted server, a session expired by its peers, backoff: 2 busy cores
    session = SESSION  # the contenders' session timeout (a supervised round draws its own)

    def __init__(self, workdir: Path) -> None:
        from tests.support.faultproxy import FaultProxy
        from tests.support.kubeapi.process import FakeKubeApi

        self.workdir = workdir
        self.server = FakeKubeApi(workdir / "kubeapi")
        self.server.start()
        self._proxy = FaultProxy
        # a proxy (a thread) per contender: a proxy connects upstream synchronously, so while
        # the server is paused one contender's new connections hold up only its own link
        self.proxies: dict[str, Any] = {}
        self.links: dict[str, Any] = {}
        self.namespace = ""
        self.state = "up"  # up, paused, down
        self._lock = anyio.Lock()  # one change of the server's state at a time

    async def begin(self, seed: int, workdir: Path) -> None:
        for proxy in self.proxies.values():  # last round's: close their ports
            proxy.close()
        self.proxies, self.links = {}, {}
        self.namespace = f"chaos-{seed}-{uuid.uuid4().hex[:6]}"
        await self._serving()
        await anyio.to_thread.run_sync(self.server.create_namespace, self.namespace)

    async def _serving(self) -> None:
        """Wait for the server to answer (a loaded machine may be slow to); one that never
        does is started again on its state, so that one round's damage ends with it."""
        for _ in range(3):
            try:
                await anyio.to_thread.run_sync(self.server.stats)
                return
            except OSError:  # urllib's errors and timeouts
                await anyio.sleep(1)
        await anyio.to_thread.run_sync(self.server.restart)
        self.state = "up"

    def _url(self, server: str, session_timeout: float) -> str:
        from tests.support.backends.kubernetes import write_kubeconfig

        config = write_kubeconfig(self.workdir, server, self.namespace)
        return (
            f"k8s://{self.namespace}/{ROOT}?kubeconfig={config}&session_timeout={session_timeout}"
        )

    def url(self, identity: str) -> str:
        assert self.server.port is not None
        proxy = self.proxies[identity] = self._proxy()
        link = self.links[identity] = proxy.link(("127.0.0.1", self.server.port))
        return self._url(f"http://{link.hosts}", self.session)

    def direct_url(self, session: float) -> str:
        return self._url(self.server.url, session)

    def observer_url(self) -> str:
        # a long connect timeout: on a loaded machine the fake may take seconds to answer
        return self._url(self.server.url, 5) + "&connect_timeout=30"

    async def apply(self, fault: Fault, fleet: Fleet, tg: anyio.abc.TaskGroup) -> str | None:
        length = fault.length * self.session
        async with self._lock:
            if self.state != "up":
                return None  # the server is paused or down: that fault is under way
            if fault.kind in ("link_pause", "link_drop"):
                return self._link(fault, fleet, length, tg)
            if fault.kind == "api_pause":
                self.server.pause()
                self.state = "paused"
                tg.start_soon(self._later, length, self._resume)
                return f"pause the API server {length:.2f}s"
            if fault.kind == "api_restart":
                await anyio.to_thread.run_sync(self.server.kill)
                self.state = "down"
                tg.start_soon(self._later, length, self._start)
                return f"kill the API server, start it after {length:.2f}s"
            try:  # the fake's admin calls: on a loaded machine it may not answer in time
                if fault.kind == "conflicts":
                    count = STORM[0] + int(fault.pick * (STORM[1] - STORM[0]))
                    path = f"/namespaces/{self.namespace}/"
                    await anyio.to_thread.run_sync(self._fail, count, path)
                    return f"409 on the next {count} updates"
                if fault.kind == "watch_expiry":
                    await anyio.to_thread.run_sync(self._expire_watches, fault.pick < 0.5)
                    return "history compacted, watches ended" + (
                        " abruptly" if fault.pick < 0.5 else ""
                    )
            except OSError as exc:  # urllib's errors; heal() starts a server that is gone
                return f"left {fault.kind} alone: the API server did not answer ({exc})"
            return await self._lease(fault.kind, fleet)

    def _fail(self, count: int, path: str) -> None:
        self.server.fail(count, 409, verb="update", path=path)

    def _expire_watches(self, abrupt: bool) -> None:
        self.server.compact()
        self.server.close_watches(abrupt=abrupt)

    def _link(
        self, fault: Fault, fleet: Fleet, length: float, tg: anyio.abc.TaskGroup
    ) -> str | None:
        proc = fleet.target(fault.pick)
        if proc is None or proc.identity not in self.links:
            return None
        link = self.links[proc.identity]
        try:
            if fault.kind == "link_drop":
                link.drop()
                return f"drop the link of {proc.identity}"
            link.pause()
        except RuntimeError as exc:  # its proxy is still connecting upstream (after a pause)
            return f"link of {proc.identity} left alone: {exc}"
        tg.start_soon(self._later, length, self._accept, link)
        return f"pause the link of {proc.identity} {length:.2f}s"

    def _accept(self, link: Any) -> None:
        with contextlib.suppress(RuntimeError):  # closed with its round, or busy: heal retries
            link.accept()

    async def _lease(self, kind: str, fleet: Fleet) -> str | None:
        """Take away or delete the Lease of whoever acted last (if lately)."""
        from ha.drivers.kubernetes.settings import Settings

        acts = [a for a in fleet.tail.read()[-50:] if a["kind"] == "act"]
        if not acts or acts[-1]["end"] < time.monotonic() - 0.5 or not acts[-1].get("sid"):
            return None
        identity, session = acts[-1]["identity"], int(acts[-1]["sid"])
        name = Settings.check(self.namespace, ROOT).lease(session)
        path = f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases/{name}"
        if kind == "lease_deleted":
            fleet.expiries.append((identity, time.monotonic()))
            status, _ = await anyio.to_thread.run_sync(self.server.request, "DELETE", path)
            return f"delete the Lease of {identity} ({status})"
        status, lease = await anyio.to_thread.run_sync(self.server.request, "GET", path)
        if status != 200:
            return None
        lease["spec"]["holderIdentity"] = "intruder"  # its resourceVersion: a CAS, as client-go
        status, _ = await anyio.to_thread.run_sync(self.server.request, "PUT", path, lease)
        return f"take the Lease of {identity} ({status})"

    async def _later(self, delay: float, action: Any, *args: Any) -> None:
        await anyio.sleep(delay)
        result = action(*args)
        if result is not None:
            await result

    async def _resume(self) -> None:
        async with self._lock:
            if self.state == "paused":
                self.server.resume()
                self.state = "up"

    async def _start(self) -> None:
        async with self._lock:
            if self.state == "down":
                await anyio.to_thread.run_sync(self.server.start)
                self.state = "up"

    async def heal(self) -> None:
        await self._resume()  # first: the proxies' connects upstream go through again
        await self._start()
        await self._serving()  # a start that did not come up is tried again
        await anyio.to_thread.run_sync(self.server.reset_faults)
        for link in self.links.values():
            await anyio.to_thread.run_sync(link.accept)

    async def describe(self) -> str:
        return f"fake API server {self.state}, namespace {self.namespace}"

    def logs(self) -> list[Path]:
        return [self.server.log]

    def close(self) -> None:
        for proxy in self.proxies.values():
            with contextlib.suppress(RuntimeError):
                proxy.close()
        self.server.remove()
