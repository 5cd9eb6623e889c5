"""Watches: ``?watch=true`` answered as a stream of JSON lines, one event per chunk.

What kube-apiserver does, and so the fake:

- without a ``resourceVersion`` (or with "0"), the stream starts with a synthetic ADDED event
  per current object, then goes on with changes;
- with one, it sends every change after it; if that version is older than the resource's
  kept history (store.py) the stream is a single ERROR event carrying a 410 Expired Status
  (HTTP status 200: once the version parsed, the real cacher reports errors as watch events,
  storage/cacher/cacher.go ``Watch``); if it is newer than the store, the watch is accepted
  at once and sends what comes after that version (cacher.go
  ``waitUntilWatchCacheFreshAndForceAllEvents`` waits only for ``sendInitialEvents``
  watches). A LIST or GET from a future version waits up to 3 s for it, then gets 504 "Too
  large resource version" (watch_cache.go ``waitUntilFreshAndBlock``, ``blockTimeout``);
- selectors apply to both sides of a change: an object that stops matching is sent as
  DELETED, one that starts matching as ADDED;
- the server ends each watch after ``timeoutSeconds``, or by default after a random time
  between the minimum request timeout and twice it, so clients must resume from the last
  resourceVersion they saw;
- ``allowWatchBookmarks=true`` adds BOOKMARK events (an object with only
  ``metadata.resourceVersion``) every bookmark interval.

The fault hooks can end every open watch (``close-watches``), cleanly or by dropping the
connection, as a restarting apiserver does.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tests.support.kubeapi.resources import Resource
from tests.support.kubeapi.selectors import Matcher, matcher
from tests.support.kubeapi.status import ApiError, bad_request, expired
from tests.support.kubeapi.store import Event, Store, TooOld

__all__ = ("Abort", "WatchSettings", "parse_version", "serve_watch", "wait_fresh")


@dataclass(frozen=True)
class WatchSettings:
    min_request_timeout: float = 1800.0
    bookmark_interval: float = 60.0
    fresh_wait: float = 3.0  # how long a read from a future version waits for it


def wait_fresh(store: Store, version: int, wait: float) -> None:
    """Wait until the store has reached ``version``; 504 "Too large resource version" if it
    does not within ``wait`` seconds (the watch cache's 3 s), as kube-apiserver answers."""
    deadline = time.monotonic() + wait
    with store.cond:
        while store.rv < version:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ApiError(
                    504,
                    "Timeout",
                    f"Timeout: Too large resource version: {version}, current: {store.rv}",
                    {
                        "causes": [
                            {
                                "reason": "ResourceVersionTooLarge",
                                "message": "Too large resource version",
                            }
                        ],
                        "retryAfterSeconds": 1,
                    },
                )
            store.cond.wait(left)


class Abort(Exception):
    """End the watch by dropping the connection, without the final empty chunk."""


def parse_version(value: str | None) -> int | None:
    """A resourceVersion from a query: None for "start from now", 400 if not a number."""
    if value in (None, "", "0"):
        return None
    try:
        return int(value)
    except ValueError:
        raise bad_request(f"resourceVersion: Invalid value: {value!r}: must be a number") from None


def _translate(event: Event, match: Matcher) -> str | None:
    now = match(event.object)
    if event.type == "MODIFIED" and event.previous is not None:
        before = match(event.previous)
        if now and before:
            return "MODIFIED"
        if now:
            return "ADDED"
        return "DELETED" if before else None
    return event.type if now else None


def serve_watch(
    store: Store,
    resource: Resource,
    namespace: str | None,
    query: dict[str, str],
    send: Callable[[dict[str, Any]], None],
    closed: Callable[[], str | None],
    settings: WatchSettings,
) -> None:
    """Stream events through ``send`` until timeout, 410, ``closed()`` says so, or send fails.

    ``closed()`` returns None while the watch may go on, "graceful" or "abrupt" (then Abort
    is raised so the caller drops the connection).
    """
    match = matcher(resource, query.get("labelSelector"), query.get("fieldSelector"))
    start = parse_version(query.get("resourceVersion"))
    if query.get("timeoutSeconds"):
        timeout = float(query["timeoutSeconds"])
    else:
        low = settings.min_request_timeout
        timeout = random.uniform(low, 2 * low)
    bookmarks = query.get("allowWatchBookmarks") == "true"
    deadline = time.monotonic() + timeout
    next_bookmark = time.monotonic() + settings.bookmark_interval

    def wanted(event: Event) -> bool:
        return namespace is None or event.key[1] == namespace

    with store.cond:
        if start is None:
            initial = [obj for obj in store.select(resource.key, namespace) if match(obj)]
            cursor = store.rv
        else:
            initial, cursor = [], start
            try:
                store.since(resource.key, cursor)
            except TooOld as too_old:
                send({"type": "ERROR", "object": expired(too_old.requested, too_old.oldest)})
                return
    for obj in initial:
        send({"type": "ADDED", "object": obj})
    while True:
        with store.cond:
            while True:
                state = closed()
                if state == "abrupt":
                    raise Abort
                now = time.monotonic()
                if state == "graceful" or now >= deadline:
                    return
                try:
                    events = store.since(resource.key, cursor)
                except TooOld as too_old:
                    events = None
                    error = expired(too_old.requested, too_old.oldest)
                    break
                # a watch from a future version hears nothing until the store reaches it
                marking = bookmarks and store.rv >= cursor
                if events or (marking and now >= next_bookmark):
                    break
                wake = min(deadline, next_bookmark) if marking else deadline
                store.cond.wait(max(0.0, min(wake - now, 1.0)))
            rv = store.rv
        if events is None:
            send({"type": "ERROR", "object": error})
            return
        for event in events:
            cursor = event.rv
            kind = _translate(event, match) if wanted(event) else None
            if kind is not None:
                send({"type": kind, "object": event.object})
        if bookmarks and time.monotonic() >= next_bookmark and rv >= cursor:
            next_bookmark = time.monotonic() + settings.bookmark_interval
            send(
                {
                    "type": "BOOKMARK",
                    "object": {
                        "kind": resource.kind,
                        "apiVersion": resource.api_version,
                        "metadata": {"resourceVersion": str(rv)},
                    },
                }
            )
