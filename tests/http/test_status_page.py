"""The status page's routes in-process, under asyncio and trio: ``/`` is the page,
``/status.json`` the election as ``ha status --json`` reads it (leases included) with its
history; a backend that does not answer is an ``error`` in time, not a hang; a job manager's
page lists its cluster's jobs. The page itself is tested in a browser:
test_status_page_browser.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from ha.admin import election_status
from ha.election.elector import Elector
from ha.election.machine import State
from ha.http import ElectionEndpoints, serve, serve_job_manager
from ha.metrics import Registry
from ha.testing import History, Recorder
from tests.support.http import get

pytestmark = pytest.mark.anyio


async def document(address: tuple[str, int]) -> tuple[int, dict[str, Any]]:
    status, headers, body = await get(address, "/status.json")
    assert headers["Content-Type"] == "application/json"
    found: dict[str, Any] = json.loads(body)
    return status, found


async def test_the_page_and_its_document(sqlite_backend: Any) -> None:
    history = History()
    async with sqlite_backend.driver() as da, sqlite_backend.driver() as db:
        async with anyio.create_task_group() as tg:
            a, b = Elector(da, "/web", "a"), Elector(db, "/web", "b")
            tg.start_soon(a.run, Recorder("a", history))
            lease = await a.wait_active()
            tg.start_soon(b.run, Recorder("b", history))
            await b.wait_state(State.STANDBY)
            routes = ElectionEndpoints(db, "/web", b"b", lambda: b.state.value, Registry())
            address = await tg.start(serve, "127.0.0.1", 0, routes)

            # the readiness of a pod whose Service selects the active by its role label:
            # a standby is Ready too (deploy/kubernetes), a process out of the election is not
            assert (await get(address, "/member"))[::2] == (200, b"standby\n")

            status, headers, page = await get(address, "/")
            assert status == 200 and headers["Content-Type"] == "text/html; charset=utf-8"
            assert b"status.json" in page and b"<script>" in page  # no build step: all inline

            with anyio.fail_after(10):  # the term is recorded in the background
                while True:
                    status, doc = await document(address)
                    if doc["elections"][0]["history"]:
                        break
                    await anyio.sleep(0.05)
            assert status == 200
            assert doc["process"] == {
                "identity": "b",
                "state": "standby",
                "connected": True,
                "backend": "sqlite",
            }
            (election,) = doc["elections"]
            assert election["active"] == "a" and election["epoch"] == lease.epoch
            assert [c["identity"] for c in election["contenders"]] == ["a", "b"]
            for contender in election["contenders"]:  # renewal ages, as `ha status` shows
                assert contender["lease"]["renewed_ago"] >= 0
            (term,) = election["history"]
            assert term["identity"] == "a" and term["epoch"] == lease.epoch
            assert doc["jobs"] is None  # not a job manager
            # the same reading as `ha status --json`, history aside
            reading = (await election_status(db, "/web", leases=True)).to_json()
            for key in ("path", "active", "epoch", "since", "paused", "problems"):
                assert election[key] == reading[key]
            a.quit()
            with anyio.fail_after(10):
                await b.wait_active()
            with anyio.fail_after(10):  # a reading is shared for a second (Readings)
                while True:
                    _, doc = await document(address)
                    if [c["identity"] for c in doc["elections"][0]["contenders"]] == ["b"]:
                        break
                    await anyio.sleep(0.1)
            assert doc["process"]["state"] == "active"
            b.quit()
            await b.wait_state(State.NEUTRAL)
            tg.cancel_scope.cancel()


async def test_a_backend_that_does_not_answer_is_an_error_in_time(memory_backend: Any) -> None:
    async with memory_backend.driver(session_timeout=1.0) as driver:
        routes = ElectionEndpoints(driver, "/web", b"a", lambda: "neutral", Registry())
        async with anyio.create_task_group() as tg:
            address = await tg.start(serve, "127.0.0.1", 0, routes)
            assert (await get(address, "/member"))[::2] == (503, b"neutral\n")
            driver.freeze()  # every call waits: the reading is bounded by the session timeout
            with anyio.fail_after(10):
                status, doc = await document(address)
            driver.thaw()
            tg.cancel_scope.cancel()
    assert status == 503 and doc["elections"] == [] and doc["error"]
    assert doc["process"]["identity"] == "a"


async def test_a_job_managers_page_lists_its_jobs(sqlite_backend: Any, tmp_path: Path) -> None:
    """A cold standby job manager (no Spark until elected) serves its cluster's jobs: one
    submitted and waiting for an active, with its batches to run."""
    from ha.pipeline.api.plan import make_plan
    from ha.pipeline.client import submit_job
    from ha.pipeline.examples.clicks import generate_clicks
    from ha.pipeline.jobmanager import JobManager

    generate_clicks(tmp_path / "in", days=2, rows_per_day=10, users=3, seed=1)
    history = History()
    async with sqlite_backend.driver() as dx, sqlite_backend.driver() as dj:
        manager = JobManager(dj, "c1", identity="jm-1", blobs=tmp_path / "blobs", hot_standby=False)
        leader = Elector(dx, manager.elector.path, "x")
        plan = make_plan(
            "clicks.sessionize",
            {"input": str(tmp_path / "in")},
            str(tmp_path / "out"),
            job_id="j1",
        )
        async with anyio.create_task_group() as tg:
            tg.start_soon(leader.run, Recorder("x", history))
            await leader.wait_active()
            await submit_job(dx, "c1", plan)
            address = await tg.start(serve_job_manager, manager, "127.0.0.1", 0)
            tg.start_soon(manager.run)
            await manager.elector.wait_state(State.STANDBY)
            status, doc = await document(address)
            assert status == 200
            (job,) = doc["jobs"]
            assert job["job_id"] == "j1" and job["state"] == "submitted"
            assert job["pipeline"] == "clicks.sessionize" and job["batches_done"] == 0
            assert job["batches"] == 2  # one per day of clicks
            assert (job["failures"], job["deaths"], job["epoch"]) == (0, 0, None)
            election = doc["elections"][0]
            assert election["path"] == manager.elector.path and election["active"] == "x"
            manager.quit()
            leader.quit()
            await manager.elector.wait_state(State.NEUTRAL)
            tg.cancel_scope.cancel()


async def test_viewers_at_once_share_one_reading(sqlite_backend: Any) -> None:
    """Several tabs or viewers polling the page read the backend once, not once each."""
    async with sqlite_backend.driver() as driver:
        reads = 0
        real = driver.children

        async def counted(path: str) -> list[str]:
            nonlocal reads
            reads += 1
            return await real(path)

        driver.children = counted  # type: ignore[method-assign]
        async with anyio.create_task_group() as tg:
            alone = ElectionEndpoints(driver, "/web", b"a", lambda: "neutral", Registry())
            address = await tg.start(serve, "127.0.0.1", 0, alone)
            await document(address)
            one = reads  # what one reading costs
            assert one > 0
            shared = ElectionEndpoints(driver, "/web", b"a", lambda: "neutral", Registry())
            shared.readings.FRESH = 60.0  # a slow machine must not make two readings of it
            address = await tg.start(serve, "127.0.0.1", 0, shared)
            reads = 0
            async with anyio.create_task_group() as viewers:
                for _ in range(5):
                    viewers.start_soon(document, address)
            await document(address)  # later, still fresh
            assert reads == one
            tg.cancel_scope.cancel()
