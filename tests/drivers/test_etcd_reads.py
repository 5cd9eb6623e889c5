"""The etcd driver under many concurrent readers: their reads share transactions
(ha/drivers/etcd/reads.py), each still gets its own answer, and a fault or a closing driver
reaches exactly the readers it should.

Requests are counted by the server itself (etcd's ``grpc_server_handled_total`` for Txn on
its metrics port). Every test runs under asyncio and trio against a real etcd.
"""

from __future__ import annotations

import base64
from typing import Any

import anyio
import pytest

from ha.drivers.etcd import EtcdDriver
from ha.errors import AccessDenied, ConnectionLost, NoNode
from ha.testing import faults
from tests.support.backends.etcd import EtcdBackend, EtcdServer
from tests.support.etcd_calls import sent_at_start, transactions

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

READERS = 300  # 900 range requests: more than one transaction's LIMIT, in nested ones


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


async def test_concurrent_reads_share_transactions(etcd_backend: EtcdBackend) -> None:
    async with etcd_backend.driver() as driver:
        for number in range(10):
            await driver.create(f"/n{number}", b"%d" % number)
        answers: dict[int, bytes] = {}

        async def read(number: int) -> None:
            answers[number], _ = await driver.get(f"/n{number % 10}")

        before = transactions(etcd_backend)
        async with anyio.create_task_group() as tg:
            for number in range(READERS):
                tg.start_soon(read, number)
        sent = transactions(etcd_backend) - before
    assert answers == {number: b"%d" % (number % 10) for number in range(READERS)}
    assert sent <= READERS // 10, f"{READERS} concurrent reads took {sent} transactions"


async def test_reads_made_as_the_driver_starts_share_transactions(
    etcd_backend: EtcdBackend,
) -> None:
    sent = await sent_at_start(etcd_backend, lambda d, n: d.exists(f"/n{n}"), READERS)
    assert sent <= READERS // 10, f"{READERS} reads at the start took {sent} transactions"


async def test_a_missing_node_fails_only_its_reader(etcd_backend: EtcdBackend) -> None:
    async with etcd_backend.driver() as driver:
        await driver.create("/here", b"yes")
        outcomes: dict[str, object] = {}

        async def read(path: str) -> None:
            try:
                outcomes[path] = (await driver.get(path))[0]
            except NoNode as exc:
                outcomes[path] = exc

        async with anyio.create_task_group() as tg:
            for path in ("/here", "/gone", "/here", "/gone"):
                tg.start_soon(read, path)
    assert outcomes["/here"] == b"yes"
    assert isinstance(outcomes["/gone"], NoNode)


async def test_an_injected_failure_hits_one_reader_only(etcd_backend: EtcdBackend) -> None:
    async with etcd_backend.driver() as driver:
        await driver.create("/x", b"1")
        faults(driver).fail_next(1)
        failed, read = 0, 0

        async def reader() -> None:
            nonlocal failed, read
            try:
                await driver.get("/x")
                read += 1
            except ConnectionLost:
                failed += 1

        async with anyio.create_task_group() as tg:
            for _ in range(10):
                tg.start_soon(reader)
    assert (failed, read) == (1, 9)


async def test_reads_waiting_when_the_driver_closes_fail_cleanly(
    etcd_backend: EtcdBackend,
) -> None:
    driver = etcd_backend.driver()
    await driver.start()
    outcomes: list[object] = []

    async def reader() -> None:
        try:
            outcomes.append(await driver.exists("/nothing"))
        except ConnectionLost as exc:
            outcomes.append(exc)

    async with anyio.create_task_group() as tg:
        for _ in range(20):
            tg.start_soon(reader)
        await anyio.sleep(0)  # they are on their way
        await driver.aclose()
    assert len(outcomes) == 20  # every reader got an answer or an error, none hung
    assert all(o is None or isinstance(o, ConnectionLost) for o in outcomes)
    with pytest.raises(ConnectionLost):
        await driver.exists("/nothing")


async def test_a_read_refused_by_etcd_fails_only_its_reader(etcd_server_factory: Any) -> None:
    # a role that grants the prefix but the key of node /b: etcd refuses any transaction that
    # reads it, so a read of /b sharing one with reads of /a is sent again alone. The reads are
    # the driver's first: they wait for one token (sent without, etcd refused them)
    server: EtcdServer = etcd_server_factory()

    def grant(start: str, end: str) -> None:
        perm = {"permType": "READWRITE", "key": _b64(start), "range_end": _b64(end)}
        server.call("auth/role/grant", {"name": "app", "perm": perm})

    server.call("auth/user/add", {"name": "root", "password": "rootpw"})
    server.call("auth/role/add", {"name": "root"})
    server.call("auth/user/grant", {"user": "root", "role": "root"})
    server.call("auth/user/add", {"name": "app", "password": "apppw"})
    server.call("auth/role/add", {"name": "app"})
    grant("/app/", "/app/001/b")
    grant("/app/001/b\0", "/app0")  # every key but /app/001/b itself
    server.call("auth/user/grant", {"user": "app", "role": "app"})
    server.call("auth/enable", {})
    async with EtcdDriver.from_url(f"etcd://app:apppw@{server.hosts}/app") as driver:
        for _ in range(2):  # the driver's first reads, then reads once it has its token
            outcomes: list[tuple[str, object]] = []
            async with anyio.create_task_group() as tg:
                for path in ("/a", "/b") * 10:
                    tg.start_soon(_exists, driver, path, outcomes)
            assert sorted(p for p, o in outcomes if o is None) == ["/a"] * 10
            assert sorted(p for p, o in outcomes if isinstance(o, AccessDenied)) == ["/b"] * 10


async def _exists(driver: EtcdDriver, path: str, outcomes: list[tuple[str, object]]) -> None:
    try:
        outcomes.append((path, await driver.exists(path)))
    except AccessDenied as exc:
        outcomes.append((path, exc))
