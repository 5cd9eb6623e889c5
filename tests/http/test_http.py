"""The --http endpoint served on anyio (asyncio and trio) for real electors on sqlite and
ZooKeeper: /healthz, /readyz (200 only on the active), /leader, /metrics (parsed), and the
server's answers to what it does not serve."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from ha.election.elector import Elector
from ha.election.machine import State
from ha.errors import ConfigurationError
from ha.http import ElectionEndpoints, Response, parse_address, serve, serve_job_manager
from ha.metrics import ElectorMetrics, Registry
from ha.testing import History, Recorder
from tests.support.http import get, request
from tests.support.metrics import parse, value

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["sqlite", pytest.param("zookeeper", marks=pytest.mark.zookeeper)])
def real_backend(request: pytest.FixtureRequest) -> Any:
    return request.getfixturevalue(f"{request.param}_backend")


async def test_the_endpoints_of_an_active_and_a_standby(real_backend: Any) -> None:
    history = History()
    async with real_backend.driver() as da, real_backend.driver() as db:
        async with anyio.create_task_group() as tg:
            addresses = {}
            electors = {}
            for name, driver in (("a", da), ("b", db)):
                registry = Registry()
                elector = Elector(driver, "/web", name)
                contender = ElectorMetrics(registry).watch(elector, Recorder(name, history))
                endpoints = ElectionEndpoints(
                    driver, "/web", name.encode(), lambda e=elector: e.state.value, registry
                )
                addresses[name] = await tg.start(serve, "127.0.0.1", 0, endpoints)
                electors[name] = elector
                tg.start_soon(elector.run, contender)
                await elector.wait_state(State.ACTIVE, State.STANDBY)
            lease = await electors["a"].wait_active()
            a, b = addresses["a"], addresses["b"]

            assert (await get(a, "/readyz"))[0] == 200
            status, _, body = await get(b, "/readyz")
            assert (status, body) == (503, b"standby\n")

            for who, address in addresses.items():
                status, headers, body = await get(address, "/leader")
                assert status == 200 and headers["Content-Type"] == "application/json"
                leader = json.loads(body)
                assert leader["identity"] == "a" and leader["epoch"] == lease.epoch
                assert leader["self"] is (who == "a") and leader["since"] > 0

                status, _, body = await get(address, "/healthz")
                health = json.loads(body)
                assert status == 200 and health["identity"] == who and health["connected"]

            status, headers, body = await get(b, "/metrics?x=1")
            assert status == 200 and headers["Content-Type"].startswith("text/plain; version=0.0.4")
            samples = parse(body.decode())
            assert value(samples, "ha_elector_is_leader", election="/web", identity="b") == 0

            # HEAD: the headers of GET, no body
            status, headers, body = await request(a, b"HEAD /readyz HTTP/1.1\r\n\r\n")
            assert status == 200 and body == b"" and headers["Content-Length"] == "7"

            electors["a"].quit()
            await electors["b"].wait_active()
            assert (await get(b, "/readyz"))[0] == 200
            assert (await get(a, "/readyz"))[0] == 503
            electors["b"].quit()
            # nobody leads once b's node is gone: /leader says so with 503 and nulls
            with anyio.fail_after(10):
                while (found := await get(a, "/leader"))[0] == 200:
                    await anyio.sleep(0.02)
            status, _, body = found
            assert status == 503 and json.loads(body)["identity"] is None
            tg.cancel_scope.cancel()


async def test_what_the_server_does_not_serve() -> None:
    async def handler(path: str) -> Response:
        if path == "/boom":
            raise RuntimeError("a bug")
        return Response.text(200, path)

    async with anyio.create_task_group() as tg:
        address = await tg.start(serve, "127.0.0.1", 0, handler)
        assert (await request(address, b"POST /x HTTP/1.1\r\n\r\n"))[0] == 405
        assert (await request(address, b"nonsense\r\n\r\n"))[0] == 400
        assert (await request(address, b"GET / HTTP/1.1\r\n" + b"x" * 9000 + b"\r\n\r\n"))[0] == 400
        status, _, body = await get(address, "/boom")
        assert status == 500 and b"RuntimeError" in body
        # a client that connects and leaves costs nothing
        async with await anyio.connect_tcp(*address):
            pass
        assert (await get(address, "/ok"))[2] == b"/ok\n"
        tg.cancel_scope.cancel()


def test_addresses() -> None:
    assert parse_address("127.0.0.1:8008") == ("127.0.0.1", 8008)
    assert parse_address(":9000") == ("0.0.0.0", 9000)
    assert parse_address("[::1]:80") == ("::1", 80)
    for bad in ("8008", "host:", "host:x", "h:70000"):
        with pytest.raises(ConfigurationError, match="HOST:PORT"):
            parse_address(bad)


async def test_a_standby_job_manager_is_served_and_measured(
    sqlite_backend: Any, tmp_path: Path
) -> None:
    """serve_job_manager on a cold standby (no Spark until elected): 503, the leader named,
    its metrics present, its fences counted through the hook set on the instance."""
    from ha.pipeline.jobmanager import JobManager

    history = History()
    async with sqlite_backend.driver() as dx, sqlite_backend.driver() as dj:
        manager = JobManager(dj, "c1", identity="jm-1", blobs=tmp_path / "blobs", hot_standby=False)
        leader = Elector(dx, manager.elector.path, "x")
        async with anyio.create_task_group() as tg:
            tg.start_soon(leader.run, Recorder("x", history))
            lease = await leader.wait_active()
            address = await tg.start(serve_job_manager, manager, "127.0.0.1", 0)
            tg.start_soon(manager.run)
            await manager.elector.wait_state(State.STANDBY)
            assert (await get(address, "/readyz"))[:3:2] == (503, b"standby\n")
            found = json.loads((await get(address, "/leader"))[2])
            assert found["identity"] == "x" and found["epoch"] == lease.epoch
            samples = parse((await get(address, "/metrics"))[2].decode())
            path = manager.elector.path
            assert value(samples, "ha_elector_is_leader", election=path, identity="jm-1") == 0
            assert (
                value(samples, "ha_jobmanager_batches_total", identity="jm-1", outcome="committed")
                == 0
            )
            assert (
                value(samples, "ha_elector_fence_attempts_total", election=path, identity="jm-1")
                == 0
            )
            assert (  # counted through the services' contender (on_elector): see #15's test
                value(samples, "ha_elector_fence_failures_total", election=path, identity="jm-1")
                == 0
            )
            manager.quit()
            leader.quit()
            await manager.elector.wait_state(State.NEUTRAL)
            tg.cancel_scope.cancel()  # the server serves until cancelled
