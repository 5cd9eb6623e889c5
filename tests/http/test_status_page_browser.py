"""The status page of `ha run --http` in a real browser (headless Chromium, tests/support/
browser.py) while a real failover happens: two `ha run` processes on the embedded backend, one
on asyncio and one on trio; the standby's page is loaded, the active is SIGKILLed, and the same
page, never reloaded, must show the new leader, its queue and the history's two terms.

The screenshots are written to $HA_SCREENSHOTS when set (else the test's own directory), so a
person can look at what the browser drew.
"""

from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
import anyio.to_thread
import pytest

from ha.election.elector import Elector
from ha.election.machine import State
from ha.http import serve_job_manager
from ha.testing import History, Recorder
from tests.support.browser import Browser, chromium
from tests.support.cli import popen_ha, wait_until
from tests.support.http import SLEEP, Hosts, http_get

QUEUE = "[...document.querySelectorAll('#queue tbody tr')].map(r => r.dataset.identity)"
LEADER = "document.querySelector('[data-role=leader]')?.textContent"


def queue_is(*names: str) -> str:
    """An expression: the page's queue, in order, is ``names``."""
    return (
        f"JSON.stringify({QUEUE}) === {json.dumps(json.dumps(list(names), separators=(',', ':')))}"
    )


def shots(tmp_path: Path) -> Path:
    where = Path(os.environ.get("HA_SCREENSHOTS") or tmp_path)
    where.mkdir(parents=True, exist_ok=True)
    return where


def start(hosts: Hosts, name: str, backend: str) -> None:
    env = hosts.env | {"HA_ASYNC_BACKEND": backend}
    hosts.procs[name] = popen_ha(
        "run", "/svc", "--id", name, "--http", "127.0.0.1:0", "--", *SLEEP,
        env=env, log=hosts.directory / f"{name}.log",
    )  # fmt: skip


def test_the_page_follows_a_failover_in_a_browser(tmp_path: Path) -> None:
    chromium()
    where = shots(tmp_path)
    with Hosts(tmp_path) as hosts, Browser(tmp_path) as browser:
        start(hosts, "host-a", "asyncio")
        wait_until(lambda: hosts.ready("host-a"), "host-a active")
        start(hosts, "host-b", "trio")
        b = hosts.port("host-b")
        wait_until(lambda: b"standby" in http_get(b, "/readyz")[1], "host-b standby")

        status, page = http_get(b, "/")
        assert status == 200 and page.startswith(b"<!doctype html>")
        browser.goto(f"http://127.0.0.1:{b}/")
        browser.wait_for(queue_is("host-a", "host-b"), "the queue")
        assert browser.evaluate(LEADER) == "host-a"
        header = browser.evaluate("document.getElementById('process').innerText")
        assert header.startswith("host-b") and "standby" in header and "sqlite" in header
        me = browser.evaluate("document.querySelector('#queue tr.me').dataset.identity")
        assert me == "host-b"  # the page says which row is the process serving it
        # sqlite tells each session's renewal: an age, not n/a
        renewed = browser.evaluate(
            "[...document.querySelectorAll('#queue td[data-col=renewed]')].map(t => t.textContent)"
        )
        assert all(text.endswith("s ago") for text in renewed), renewed
        browser.wait_for("document.querySelectorAll('#history tbody tr').length === 1", "a term")
        browser.screenshot(where / "status-page-before-failover.png")

        epoch = int(browser.evaluate("document.querySelector('#history tbody tr').dataset.epoch"))
        browser.evaluate("window.notReloaded = true")
        refreshed = int(browser.evaluate("document.body.dataset.refreshed"))
        hosts.procs["host-a"].send_signal(signal.SIGKILL)  # a crash: host-b fences and takes over
        hosts.procs["host-a"].wait()

        browser.wait_for(f"{LEADER} === 'host-b'", "host-b shown as the leader")
        browser.wait_for(queue_is("host-b"), "host-a gone")
        browser.wait_for("document.querySelectorAll('#history tbody tr').length === 2", "2 terms")
        assert browser.evaluate("window.notReloaded") is True  # updated in place
        assert int(browser.evaluate("document.body.dataset.refreshed")) > refreshed
        newest = browser.evaluate(
            "[...document.querySelector('#history tbody tr').cells].map(c => c.textContent)"
        )
        assert int(newest[0]) > epoch and newest[1] == "host-b"
        assert "took over from 'host-a'" in newest[4]  # the cause the history recorded
        older = browser.evaluate(
            "[...document.querySelectorAll('#history tbody tr')[1].cells].map(c => c.textContent)"
        )
        assert older[3].endswith(": lost its session: host-b took over")  # its end, recorded
        bars = browser.evaluate(
            "[...document.querySelectorAll('#timeline rect')].map(r => +r.dataset.epoch)"
        )
        assert bars == [epoch, int(newest[0])]
        header = browser.evaluate("document.getElementById('process').innerText")
        assert "active" in header

        start(hosts, "host-a", "asyncio")  # back, behind host-b
        browser.wait_for(queue_is("host-b", "host-a"), "host-a back")
        browser.screenshot(where / "status-page-after-failover.png")

        hosts.procs["host-b"].send_signal(signal.SIGKILL)  # the page's own server is gone
        hosts.procs["host-b"].wait()
        browser.wait_for("!document.getElementById('error').hidden", "the page to say so")
        said = browser.evaluate("document.getElementById('error').textContent")
        assert said.startswith("cannot read the status (") and "showing what was read" in said
        assert browser.evaluate(LEADER) == "host-b"  # the last reading, kept, dimmed
        assert browser.evaluate("document.getElementById('content').className") == "stale"
        browser.screenshot(where / "status-page-server-gone.png")
        assert browser.errors == []  # no script error in the page all along


@pytest.mark.parametrize("async_backend", ["asyncio", "trio"])
def test_a_job_managers_page_in_a_browser(
    sqlite_backend: Any, tmp_path: Path, async_backend: str
) -> None:
    """A standby job manager's page (served in-process on asyncio or trio) shows the election
    and its cluster's jobs: one submitted, its two batches to run."""
    chromium()
    from ha.pipeline.api.plan import make_plan
    from ha.pipeline.client import submit_job
    from ha.pipeline.examples.clicks import generate_clicks
    from ha.pipeline.jobmanager import JobManager

    generate_clicks(tmp_path / "in", days=2, rows_per_day=10, users=3, seed=1)
    plan = make_plan(
        "clicks.sessionize", {"input": str(tmp_path / "in")}, str(tmp_path / "out"), job_id="j1"
    )
    ready = threading.Event()
    done = threading.Event()
    address: list[tuple[str, int]] = []

    async def serve_standby() -> None:
        async with sqlite_backend.driver() as dx, sqlite_backend.driver() as dj:
            manager = JobManager(
                dj, "c1", identity="jm-2", blobs=tmp_path / "blobs", hot_standby=False
            )
            leader = Elector(dx, manager.elector.path, "jm-1")
            async with anyio.create_task_group() as tg:
                tg.start_soon(leader.run, Recorder("jm-1", History()))
                await leader.wait_active()
                await submit_job(dx, "c1", plan)
                address.append(await tg.start(serve_job_manager, manager, "127.0.0.1", 0))
                tg.start_soon(manager.run)
                await manager.elector.wait_state(State.STANDBY)
                ready.set()
                await anyio.to_thread.run_sync(done.wait)
                manager.quit()
                leader.quit()
                await manager.elector.wait_state(State.NEUTRAL)
                tg.cancel_scope.cancel()

    with anyio.from_thread.start_blocking_portal(async_backend) as portal:
        future = portal.start_task_soon(serve_standby)
        try:
            assert ready.wait(30) or future.result()
            with Browser(tmp_path) as browser:
                browser.goto(f"http://127.0.0.1:{address[0][1]}/")
                browser.wait_for("!!document.querySelector('#jobs tr[data-job=j1]')", "the job")
                cells = browser.evaluate(
                    "[...document.querySelector('#jobs tr[data-job=j1]').cells]"
                    ".map(c => c.textContent)"
                )
                assert cells[:4] == ["j1", "submitted", "clicks.sessionize", "0 / 2"]
                assert browser.evaluate(LEADER) == "jm-1"
                browser.screenshot(shots(tmp_path) / f"status-page-job-manager-{async_backend}.png")
                assert browser.errors == []
        finally:
            done.set()
            future.result(timeout=30)
