"""The ZooKeeper driver: ``zk://h1:2181,h2:2181/chroot?session_timeout=5``, on kazoo.

The node operations, each one kazoo request (a recursive delete: one multi), on the session of
``session`` with its watches (``watches``) and test hooks (``faults``).

Security: digest credentials (``auth=USER:PASSWORD``), an ACL on every node the driver creates
(``acl=open``, or ``acl=creator``: only the creating credentials), TLS through kazoo's options
(``use_ssl``, ``certfile``, ``keyfile``, ``ca``; passed through, not tested here).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Self

from ...errors import ConfigurationError, NoNode, NotEmpty, TransactionFailed
from .._input import checked_op, node_data
from ..base import Capabilities, Check, Create, Delete, Op, SessionKind, SetData, Stat
from .faults import FaultHooks
from .mapping import stat_of, transaction_results
from .settings import check_chroot, check_options, parse_hosts, parse_url
from .watches import Watches

__all__ = ("ZooKeeperDriver",)


class ZooKeeperDriver(FaultHooks, Watches):
    """A ZooKeeper session through kazoo. Build with ``from_url`` or keyword options."""

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
        super().__init__(servers, root, check_options(options))

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
        full, value = self._abs(path), node_data(data)
        created = await self._call(
            path,
            -1,
            lambda: self._client.create_async(
                full,
                value,
                acl=self._acl,
                ephemeral=ephemeral,
                sequence=sequential,
                makepath=makepath,
            ),
            leader=True,
        )
        return self._rel(str(created))

    async def get(self, path: str) -> tuple[bytes, Stat]:
        full = self._abs(path)
        data, stat = await self._call(path, -1, lambda: self._client.get_async(full))
        return bytes(data or b""), stat_of(stat)

    async def exists(self, path: str) -> Stat | None:
        full = self._abs(path)
        stat = await self._call(path, -1, lambda: self._client.exists_async(full))
        return None if stat is None else stat_of(stat)

    async def set(self, path: str, data: bytes, version: int = -1) -> Stat:
        full, value = self._abs(path), node_data(data)
        stat = await self._call(
            path, version, lambda: self._client.set_async(full, value, version), leader=True
        )
        return stat_of(stat)

    async def delete(self, path: str, version: int = -1, *, recursive: bool = False) -> None:
        full = self._abs(path)
        if path == "/":  # with a chroot, the driver's whole namespace
            raise ConfigurationError("the root node cannot be deleted")
        if not recursive:
            await self._call(
                path, version, lambda: self._client.delete_async(full, version), leader=True
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
        full = self._abs(path)
        names = await self._call(path, -1, lambda: self._client.get_children_async(full))
        return sorted(names)

    async def transaction(self, ops: Sequence[Op]) -> list[str | Stat | None]:
        ops = [checked_op(op) for op in ops]
        if not ops:
            return []

        def build() -> Any:
            tx = self._client.transaction()
            for op in ops:
                full = self._abs(op.path)
                if isinstance(op, Check):
                    tx.check(full, op.version)
                elif isinstance(op, Create):
                    tx.create(
                        full,
                        op.data,
                        acl=self._acl,
                        ephemeral=op.ephemeral,
                        sequence=op.sequential,
                    )
                elif isinstance(op, SetData):
                    tx.set_data(full, op.data, op.version)
                else:
                    tx.delete(full, op.version)
            return tx.commit_async()

        results = await self._call(ops[0].path, -1, build, leader=True)
        return transaction_results(ops, results, self._rel)
