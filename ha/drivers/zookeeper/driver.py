"""The ZooKeeper driver: ``zk://h1:2181,h2:2181/chroot?session_timeout=5``, on kazoo.

The node operations, each one kazoo request (a recursive delete: one multi), on the session of
``session`` (which dates its contact with ``contact``), with its watches (``watches``) and
test faults (``faults``): parts the driver owns.

Security: digest credentials (``auth=USER:PASSWORD``), an ACL on every node the driver creates
(``acl=open``, or ``acl=creator``: only the creating credentials), TLS through kazoo's options
(``use_ssl``, ``certfile``, ``keyfile``, ``ca``; passed through, not tested here).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Self

from ...errors import ConfigurationError, NoNode, NotEmpty, TransactionFailed
from .._closing import waits_for_a_close
from .._faults import FaultHooks
from .._input import checked_op, node_data
from .._parts import PartsDriver, SessionState
from ..base import Capabilities, Check, Create, Delete, Op, SessionKind, SetData, Stat
from .faults import ZooKeeperFaults
from .mapping import stat_of, transaction_results
from .session import KazooSession
from .settings import Options, check_chroot, check_options, parse_hosts, parse_url
from .watches import Watches

__all__ = ("ZooKeeperDriver",)


class ZooKeeperDriver(PartsDriver):
    """A ZooKeeper session through kazoo. Build with ``from_url`` or keyword options.

    A facade over the parts it owns: the kazoo client with its session and states
    (``session``, which dates ``last_contact`` with ``contact``), the watches (``watches``)
    and the test faults (``faults``)."""

    capabilities = Capabilities(
        name="zookeeper",
        cross_process=True,
        cross_host=True,
        durable=True,
        push_watches=True,
        sessions=SessionKind.SESSION,
    )

    def __init__(self, hosts: str = "127.0.0.1:2181", *, chroot: str = "", **options: Any) -> None:
        servers, root = parse_hosts(hosts), check_chroot(chroot)
        super().__init__()
        self._session = KazooSession(
            servers,
            root,
            check_options(options),
            emit=self._pass_on,
            rearm=lambda: self._watches.rearm(),
            down=lambda: self._watches.down(),
            changed=lambda: self._watches.changed(),
        )
        self._watches = Watches(self._session, self._pass_on)
        self._hooks = ZooKeeperFaults(self._session)

    @classmethod
    def from_url(cls, url: str, **options: Any) -> Self:
        """``zk://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...][/CHROOT][?OPTION=VALUE&...]``.

        Options (also as keywords, which win over the URL): session_timeout, connect_timeout,
        op_timeout, tick_time (seconds; tick_time is the ensemble's tickTime, see the module's
        doc); acl=open|creator; auth=USER:PASSWORD; create_chroot; randomize_hosts; TLS:
        use_ssl, certfile, keyfile, keyfile_password, ca, verify_certs, check_hostname.
        """
        netloc, chroot, values = parse_url(url, options)
        return cls(netloc, chroot=chroot, **values)

    # --- lifecycle, and the session as the parts keep it ------------------------------------

    async def start(self) -> None:
        await self._session.start()

    @waits_for_a_close
    async def aclose(self) -> None:
        await self._session.aclose()

    @property
    def hosts(self) -> str:
        return self._session.hosts

    @property
    def chroot(self) -> str:
        return self._session.chroot

    @property
    def options(self) -> Options:
        return self._session.options

    def _session_state(self) -> SessionState:
        return self._session

    @property
    def renewal_interval(self) -> float:
        return self._session.contact.renewal_interval

    def _watch_started(self, path: str) -> None:
        self._watches.started(path)

    def _watch_stopped(self, path: str) -> None:
        self._watches.stopped(path)

    def _faults(self) -> FaultHooks:
        return self._hooks

    # --- nodes ------------------------------------------------------------------------------

    async def create(
        self,
        path: str,
        data: bytes = b"",
        *,
        ephemeral: bool = False,
        sequential: bool = False,
        makepath: bool = False,
    ) -> str:
        full, value = self._session.abs(path), node_data(data)
        created = await self._session.call(
            path,
            -1,
            lambda: self._session.client.create_async(
                full,
                value,
                acl=self._session.acl,
                ephemeral=ephemeral,
                sequence=sequential,
                makepath=makepath,
            ),
            leader=True,
        )
        return self._session.rel(str(created))

    async def get(self, path: str) -> tuple[bytes, Stat]:
        full = self._session.abs(path)
        data, stat = await self._session.call(
            path, -1, lambda: self._session.client.get_async(full)
        )
        return bytes(data or b""), stat_of(stat)

    async def exists(self, path: str) -> Stat | None:
        full = self._session.abs(path)
        stat = await self._session.call(path, -1, lambda: self._session.client.exists_async(full))
        return None if stat is None else stat_of(stat)

    async def set(self, path: str, data: bytes, version: int = -1) -> Stat:
        full, value = self._session.abs(path), node_data(data)
        stat = await self._session.call(
            path, version, lambda: self._session.client.set_async(full, value, version), leader=True
        )
        return stat_of(stat)

    async def delete(self, path: str, version: int = -1, *, recursive: bool = False) -> None:
        full = self._session.abs(path)
        if path == "/":  # with a chroot, the driver's whole namespace
            raise ConfigurationError("the root node cannot be deleted")
        if not recursive:
            await self._session.call(
                path, version, lambda: self._session.client.delete_async(full, version), leader=True
            )
            return
        # the whole subtree in one multi, children first: all or nothing; retried if the tree
        # changed between listing and deleting
        for _attempt in range(10):
            paths = await self._subtree(path)
            ops: list[Op] = [Delete(p) for p in reversed(paths[1:])]
            ops.append(Delete(path, version))
            try:
                await self.transaction(ops)
                return
            except TransactionFailed as exc:
                if exc.index == len(ops) - 1 and not isinstance(exc.cause, NotEmpty):
                    raise exc.cause from None
        raise NotEmpty(path)

    async def _subtree(self, path: str) -> list[str]:
        """``path`` and its descendants, parents before children."""
        paths, index = [path], 0
        while index < len(paths):
            parent = paths[index]
            index += 1
            try:
                names = await self.children(parent)
            except NoNode:
                if parent == path:
                    raise
                continue
            paths.extend(f"{parent.rstrip('/')}/{name}" for name in names)
        return paths

    async def children(self, path: str) -> list[str]:
        full = self._session.abs(path)
        names = await self._session.call(
            path, -1, lambda: self._session.client.get_children_async(full)
        )
        return sorted(names)

    async def transaction(self, ops: Sequence[Op]) -> list[str | Stat | None]:
        ops = [checked_op(op) for op in ops]
        if not ops:
            return []

        def build() -> Any:
            tx = self._session.client.transaction()
            for op in ops:
                full = self._session.abs(op.path)
                if isinstance(op, Check):
                    tx.check(full, op.version)
                elif isinstance(op, Create):
                    tx.create(
                        full,
                        op.data,
                        acl=self._session.acl,
                        ephemeral=op.ephemeral,
                        sequence=op.sequential,
                    )
                elif isinstance(op, SetData):
                    tx.set_data(full, op.data, op.version)
                else:
                    tx.delete(full, op.version)
            return tx.commit_async()

        results = await self._session.call(ops[0].path, -1, build, leader=True)
        return transaction_results(ops, results, self._session.rel)
