"""The FAKE API server's watches: NDJSON streams, synthetic ADDED, resumption, 410 Expired,
selectors, server-side timeouts, bookmarks; as kube-apiserver does them (no real one runs
here). Raw HTTP on asyncio and trio."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.abc
import httpx
import pytest

from tests.support.kubeapi.paths import config_maps, lease, leases
from tests.support.kubeapi.process import FakeKubeApi

pytestmark = pytest.mark.anyio


class Watch:
    """One watch read over a plain socket, chunk by chunk (the server sends one event per
    chunk). Not httpx: breaking out of its line iterators leaves generators unfinished."""

    def __init__(self, stream: anyio.abc.ByteStream) -> None:
        self.stream = stream
        self.buffer = b""
        self.headers: dict[str, str] = {}

    async def _line(self) -> bytes:
        while b"\r\n" not in self.buffer:
            self.buffer += await self.stream.receive()
        line, self.buffer = self.buffer.split(b"\r\n", 1)
        return line

    async def _exactly(self, size: int) -> bytes:
        while len(self.buffer) < size:
            self.buffer += await self.stream.receive()
        data, self.buffer = self.buffer[:size], self.buffer[size:]
        return data

    async def start(self, target: str) -> int:
        request = f"GET {target} HTTP/1.1\r\nHost: kube\r\nAccept: application/json\r\n\r\n"
        await self.stream.send(request.encode())
        status = int((await self._line()).split()[1])
        while line := await self._line():
            name, _, value = line.decode().partition(":")
            self.headers[name.strip().lower()] = value.strip()
        return status

    def __aiter__(self) -> Watch:
        return self

    async def __anext__(self) -> dict[str, Any]:
        """The next event; StopAsyncIteration at the final chunk, EndOfStream if dropped."""
        size = int(await self._line(), 16)
        if size == 0:
            await self._line()
            raise StopAsyncIteration
        event: dict[str, Any] = json.loads(await self._exactly(size))
        await self._exactly(2)
        return event


@asynccontextmanager
async def watching(http: httpx.AsyncClient, path: str, **params: str) -> AsyncIterator[Watch]:
    """The events of one watch (ends when the server ends the stream)."""
    url = httpx.URL(str(http.base_url).rstrip("/") + path, params={"watch": "true", **params})
    async with await anyio.connect_tcp(url.host, url.port or 80) as stream:
        watch = Watch(stream)
        assert await watch.start(url.raw_path.decode()) == 200
        assert watch.headers["transfer-encoding"] == "chunked"
        yield watch


async def take(events: AsyncIterator[dict[str, Any]], count: int) -> list[dict[str, Any]]:
    taken = []
    with anyio.fail_after(10):
        async for event in events:
            taken.append(event)
            if len(taken) == count:
                break
    return taken


def summary(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(event["type"], event["object"]["metadata"].get("name", "")) for event in events]


async def test_watch_without_version_starts_with_synthetic_added(
    http: httpx.AsyncClient, kube_namespace: str
) -> None:
    await http.post(leases(kube_namespace), json=lease("a"))
    await http.post(leases(kube_namespace), json=lease("b"))
    async with watching(http, leases(kube_namespace)) as events:
        first = await take(events, 2)
        assert summary(first) == [("ADDED", "a"), ("ADDED", "b")]
        got = (await http.get(f"{leases(kube_namespace)}/a")).json()
        await http.put(
            f"{leases(kube_namespace)}/a",
            json=dict(got, spec={**got["spec"], "holderIdentity": "z"}),
        )
        await http.delete(f"{leases(kube_namespace)}/b")
        later = await take(events, 2)
    assert summary(later) == [("MODIFIED", "a"), ("DELETED", "b")]
    assert later[0]["object"]["spec"]["holderIdentity"] == "z"
    versions = [int(event["object"]["metadata"]["resourceVersion"]) for event in later]
    assert versions == sorted(versions) and versions[0] > int(got["metadata"]["resourceVersion"])


async def test_watch_resumes_after_a_resource_version(
    http: httpx.AsyncClient, kube_namespace: str
) -> None:
    first = (await http.post(config_maps(kube_namespace), json={"metadata": {"name": "a"}})).json()
    await http.post(config_maps(kube_namespace), json={"metadata": {"name": "b"}})
    await http.post(config_maps(kube_namespace), json={"metadata": {"name": "c"}})
    since = first["metadata"]["resourceVersion"]
    async with watching(http, config_maps(kube_namespace), resourceVersion=since) as events:
        assert summary(await take(events, 2)) == [("ADDED", "b"), ("ADDED", "c")]


async def test_watch_from_a_compacted_version_gets_410_expired(tuned: FakeKubeApi) -> None:
    namespace = f"w-{uuid.uuid4().hex[:8]}"
    tuned.create_namespace(namespace)
    async with httpx.AsyncClient(base_url=tuned.url) as http:
        old = (await http.post(config_maps(namespace), json={"metadata": {"name": "a"}})).json()
        await http.post(config_maps(namespace), json={"metadata": {"name": "b"}})
        tuned.compact()
        version = old["metadata"]["resourceVersion"]
        async with watching(http, config_maps(namespace), resourceVersion=version) as events:
            (error,) = await take(events, 1)
            assert [event async for event in events] == []  # the stream ends after it
        assert error["type"] == "ERROR"
        assert error["object"]["code"] == 410 and error["object"]["reason"] == "Expired"
        assert error["object"]["message"].startswith(f"too old resource version: {version} (")
        # a re-list gives a version to watch from again
        listed = (await http.get(config_maps(namespace))).json()
        fresh = listed["metadata"]["resourceVersion"]
        async with watching(http, config_maps(namespace), resourceVersion=fresh) as events:
            await http.post(config_maps(namespace), json={"metadata": {"name": "c"}})
            assert summary(await take(events, 1)) == [("ADDED", "c")]


async def test_each_resource_keeps_its_own_history_and_410s_past_it(tuned: FakeKubeApi) -> None:
    """One watch cache per resource (storage/cacher/watch_cache.go), so Lease writes never
    push the ConfigMaps' events out. Past a resource's window, ``getAllEventsSinceLocked``:
    a watch from ``rv < oldest - 1`` gets 410 "too old resource version: rv (oldest-1)";
    from ``oldest - 1`` it gets every event kept. (The tuned server keeps 3 per resource.)"""
    namespace = f"h-{uuid.uuid4().hex[:8]}"
    tuned.create_namespace(namespace)
    async with httpx.AsyncClient(base_url=tuned.url) as http:

        async def write(path: str, name: str) -> int:
            body = lease(name) if "leases" in path else {"metadata": {"name": name}}
            created = (await http.post(path, json=body)).json()
            return int(created["metadata"]["resourceVersion"])

        first = await write(config_maps(namespace), "a")
        for index in range(4):  # more Lease events than the window holds
            await write(leases(namespace), f"l{index}")
        async with watching(http, config_maps(namespace), resourceVersion=str(first)) as events:
            await write(config_maps(namespace), "b")
            assert summary(await take(events, 1)) == [("ADDED", "b")]
        kept = [await write(config_maps(namespace), name) for name in "cde"]  # a, b dropped
        oldest = kept[0]
        since = str(oldest - 1)
        async with watching(http, config_maps(namespace), resourceVersion=since) as events:
            assert summary(await take(events, 3)) == [
                ("ADDED", "c"),
                ("ADDED", "d"),
                ("ADDED", "e"),
            ]
        too_old = str(oldest - 2)
        async with watching(http, config_maps(namespace), resourceVersion=too_old) as events:
            (error,) = await take(events, 1)
        assert error["type"] == "ERROR" and error["object"]["code"] == 410
        assert error["object"]["message"] == f"too old resource version: {too_old} ({since})"


async def test_a_watch_from_a_future_version_is_accepted_a_list_waits_then_504(
    tuned: FakeKubeApi,
) -> None:
    """storage/cacher/cacher.go ``waitUntilWatchCacheFreshAndForceAllEvents``: only a
    ``sendInitialEvents`` watch waits for the cache to reach its version; a plain watch is
    accepted at once and sent the events after its version (cache_watcher.go sends only
    newer ones). A LIST from a future version waits (watch_cache.go
    ``waitUntilFreshAndBlock``, 3 s; the tuned server 0.5 s), then gets 504 "Too large
    resource version"."""
    async with httpx.AsyncClient(base_url=tuned.url) as http:
        listed = (await http.get(config_maps("default"))).json()
        current = int(listed["metadata"]["resourceVersion"])
        future = {"resourceVersion": str(current + 1000)}
        too_large = await http.get(config_maps("default"), params=future)
        assert too_large.status_code == 504
        assert too_large.json()["reason"] == "Timeout"
        assert too_large.json()["message"].startswith("Timeout: Too large resource version")
        cause = too_large.json()["details"]["causes"][0]
        assert cause["reason"] == "ResourceVersionTooLarge"
        nearly = str(current + 1)  # the next write's version: not sent, the one after is
        async with watching(http, config_maps("default"), resourceVersion=nearly) as events:
            reached = await http.post(
                config_maps("default"), json={"metadata": {"generateName": "g-"}}
            )
            assert reached.json()["metadata"]["resourceVersion"] == nearly
            await http.post(config_maps("default"), json={"metadata": {"generateName": "h-"}})
            ((kind, name),) = summary(await take(events, 1))
        assert kind == "ADDED" and name.startswith("h-")


async def test_selectors_turn_changes_into_added_and_deleted(
    http: httpx.AsyncClient, kube_namespace: str
) -> None:
    path = config_maps(kube_namespace)
    await http.post(path, json={"metadata": {"name": "a", "labels": {"on": "yes"}}})
    await http.post(path, json={"metadata": {"name": "b"}})
    async with watching(http, path, labelSelector="on=yes") as events:
        assert summary(await take(events, 1)) == [("ADDED", "a")]
        merge = {"Content-Type": "application/merge-patch+json"}
        await http.patch(f"{path}/b", json={"metadata": {"labels": {"on": "yes"}}}, headers=merge)
        await http.patch(f"{path}/a", json={"metadata": {"labels": {"on": None}}}, headers=merge)
        await http.patch(f"{path}/b", json={"data": {"k": "v"}}, headers=merge)
        assert summary(await take(events, 3)) == [
            ("ADDED", "b"),
            ("DELETED", "a"),
            ("MODIFIED", "b"),
        ]
    async with watching(http, path, fieldSelector="metadata.name=b") as events:
        await http.post(path, json={"metadata": {"name": "c"}})
        await http.delete(f"{path}/b")
        assert summary(await take(events, 2)) == [("ADDED", "b"), ("DELETED", "b")]


async def test_the_server_ends_a_watch_after_timeout_seconds(
    http: httpx.AsyncClient, kube_namespace: str
) -> None:
    with anyio.fail_after(10):
        async with watching(http, leases(kube_namespace), timeoutSeconds="1") as events:
            assert [event async for event in events] == []  # ended cleanly, nothing happened


async def test_bookmarks_carry_the_current_version(tuned: FakeKubeApi) -> None:
    async with httpx.AsyncClient(base_url=tuned.url) as http:
        created = (
            await http.post(config_maps("default"), json={"metadata": {"generateName": "a"}})
        ).json()
        version = created["metadata"]["resourceVersion"]
        params = {"resourceVersion": version, "allowWatchBookmarks": "true"}
        async with watching(http, config_maps("default"), **params) as events:
            (bookmark,) = await take(events, 1)
    assert bookmark["type"] == "BOOKMARK"
    assert bookmark["object"]["kind"] == "ConfigMap"
    assert int(bookmark["object"]["metadata"]["resourceVersion"]) >= int(version)


async def test_bad_watch_parameters_are_400(http: httpx.AsyncClient, kube_namespace: str) -> None:
    for params in (
        {"resourceVersion": "abc"},
        {"fieldSelector": "spec.x=1"},
        {"labelSelector": "a in ()"},
    ):
        answer = await http.get(leases(kube_namespace), params={"watch": "true", **params})
        assert answer.status_code == 400, params


async def test_close_watches_ends_every_stream(
    http: httpx.AsyncClient, kube_api: FakeKubeApi, kube_namespace: str
) -> None:
    async with watching(http, leases(kube_namespace)) as events:
        await http.post(leases(kube_namespace), json=lease("a"))
        assert summary(await take(events, 1)) == [("ADDED", "a")]
        kube_api.close_watches()
        with anyio.fail_after(10):
            assert [event async for event in events] == []


async def test_abrupt_close_drops_the_connection(
    http: httpx.AsyncClient, kube_api: FakeKubeApi, kube_namespace: str
) -> None:
    with pytest.raises(anyio.EndOfStream):
        async with watching(http, leases(kube_namespace)) as events:
            await http.post(leases(kube_namespace), json=lease("a"))
            await take(events, 1)
            kube_api.close_watches(abrupt=True)
            with anyio.fail_after(10):
                async for _ in events:
                    pass


async def test_legacy_watch_path_and_an_injected_410(
    http: httpx.AsyncClient, kube_api: FakeKubeApi, kube_namespace: str
) -> None:
    await http.post(leases(kube_namespace), json=lease("a"))
    await http.post(leases(kube_namespace), json=lease("b"))
    one = f"/apis/coordination.k8s.io/v1/watch/namespaces/{kube_namespace}/leases/b"
    async with watching(http, one) as events:
        assert summary(await take(events, 1)) == [("ADDED", "b")]
    kube_api.fail(1, 410, verb="watch")
    listed = (await http.get(leases(kube_namespace))).json()
    version = listed["metadata"]["resourceVersion"]
    async with watching(http, leases(kube_namespace), resourceVersion=version) as events:
        (error,) = [event async for event in events]
    assert error["type"] == "ERROR" and error["object"]["code"] == 410
    async with watching(http, leases(kube_namespace), resourceVersion=version) as events:
        await http.delete(f"{leases(kube_namespace)}/a")
        assert summary(await take(events, 1)) == [("DELETED", "a")]
