"""The FAKE API server's watch histories, on its ``Store`` alone (no process, no event loop):
the window each resource keeps, sized as kube-apiserver's watch cache sizes its own
(staging/src/k8s.io/apiserver/pkg/storage/cacher/watch_cache.go). A clock of the test's own
ages the events, so the rules are exact, never timed."""

from __future__ import annotations

import pytest

from tests.support.kubeapi.resources import RESOURCES
from tests.support.kubeapi.store import Key, Store, TooOld

CONFIG_MAPS = next(r for r in RESOURCES if r.kind == "ConfigMap").key
LEASES = next(r for r in RESOURCES if r.kind == "Lease").key


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def write(store: Store, key: Key) -> int:
    """One more event for ``key`` (created, then modified); its resourceVersion."""
    with store.cond:  # as the REST layer holds it
        if store.get(key) is None:
            written = store.create(key, {"metadata": {"name": key[2]}})
        else:
            changed = {"metadata": {"name": key[2]}, "data": {"n": str(store.rv)}}
            written = store.update(key, changed)
    return int(written["metadata"]["resourceVersion"])


def resumable(store: Store, resource: str, rv: int) -> bool:
    try:
        store.since(resource, rv)
    except TooOld:
        return False
    return True


def test_a_window_doubles_while_fresh_then_drops_its_oldest_and_halves_once_stale() -> None:
    """``resizeCacheLocked``: a full window doubles (up to its bound) while its oldest event
    is younger than ``eventFreshDuration``; at its bound it drops the oldest; full of events
    whose newest quarter is stale, it halves (down to its floor)."""
    clock = Clock()
    store = Store(history=4, history_max=16, fresh=75.0, clock=clock)
    key = (CONFIG_MAPS, "ns", "c")
    versions = [write(store, key) for _ in range(16)]  # 4 → 8 → 16: all fresh
    assert store.window(CONFIG_MAPS).capacity == 16
    assert resumable(store, CONFIG_MAPS, versions[0] - 1)  # nothing dropped yet
    versions.append(write(store, key))  # at the bound: the oldest goes
    assert not resumable(store, CONFIG_MAPS, versions[0] - 1)
    assert resumable(store, CONFIG_MAPS, versions[1] - 1)
    clock.now = 200.0  # every kept event is stale now
    versions.append(write(store, key))
    window = store.window(CONFIG_MAPS)
    assert window.capacity == 8 and len(window.events) == 8
    assert [event.rv for event in window.events] == versions[-8:]
    assert not resumable(store, CONFIG_MAPS, versions[-8] - 2)
    assert resumable(store, CONFIG_MAPS, versions[-8] - 1)  # oldest - 1: all of them


def test_each_resource_has_its_own_window() -> None:
    """One watch cache per resource: Lease renewals never push the ConfigMaps' events out."""
    store = Store(history=3, history_max=3, fresh=75.0, clock=Clock())
    tree = write(store, (CONFIG_MAPS, "ns", "tree"))
    for index in range(50):
        write(store, (LEASES, "ns", f"s{index % 5}"))
    assert [event.rv for event in store.since(CONFIG_MAPS, tree - 1)] == [tree]
    assert not resumable(store, LEASES, tree)


def test_the_floor_is_where_the_history_started_until_an_event_is_dropped() -> None:
    """``getAllEventsSinceLocked``: with nothing dropped since the history started (the
    server's start, or a re-list: ``compact``) the oldest resumable version is that start;
    once an event is dropped, the oldest kept event minus one. A version older than that is
    410, reported with the oldest resumable one."""
    store = Store(history=3, history_max=3, fresh=75.0, clock=Clock())
    key = (CONFIG_MAPS, "ns", "c")
    first = write(store, key)
    assert resumable(store, CONFIG_MAPS, 1)  # the start: every event since is kept
    later = [write(store, key) for _ in range(3)]  # ``first`` dropped
    with pytest.raises(TooOld) as info:
        store.since(CONFIG_MAPS, first - 1)
    assert (info.value.requested, info.value.oldest) == (first - 1, later[0] - 1)
    with store.cond:
        assert store.compact(later[1]) == later[1]  # a re-list at that version
    assert not resumable(store, CONFIG_MAPS, later[1] - 1)
    assert [event.rv for event in store.since(CONFIG_MAPS, later[1])] == [later[2]]
    renewed = write(store, (LEASES, "ns", "l"))  # a resource first written after it
    assert [event.rv for event in store.since(LEASES, later[1])] == [renewed]
