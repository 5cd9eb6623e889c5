"""The fake API server's storage: objects, one global resourceVersion, and a bounded history.

As in a real cluster (where the resourceVersion is etcd's revision), every write of any object
takes the next number of one counter, and that number appears on the object, on lists and on
watch events. Clients must treat it as opaque; the fake only promises it increases.

The history keeps the last ``history`` write events so that watches can resume from a
resourceVersion. A watch from before the oldest kept event gets 410 Expired, as it does when the
real server's watch cache (or etcd's compaction) has moved on; ``compact()`` forces that.

With a state file, every write is appended to it before it is answered, so a killed server
started again on the same file keeps its objects and its counter, like a control plane whose
etcd survives. The history does not survive: after a restart only watches from the
current resourceVersion can resume, older ones get 410, as after a real apiserver restart.

One lock (``cond``) guards everything; the REST layer holds it across check-then-write, and
watches wait on it for new events.
"""

from __future__ import annotations

import copy
import json
import os
import threading
import uuid
from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

__all__ = ("Event", "Key", "Store", "TooOld")

Key = tuple[str, str, str]  # (resource key "group/plural", namespace or "", name)


@dataclass(frozen=True)
class Event:
    rv: int
    type: str  # ADDED, MODIFIED, DELETED
    key: Key
    object: dict[str, Any]
    previous: dict[str, Any] | None  # the object before a MODIFIED (selectors need both)


class TooOld(Exception):
    """A resourceVersion older than the kept history."""

    def __init__(self, requested: int, oldest: int) -> None:
        super().__init__(requested, oldest)
        self.requested = requested
        self.oldest = oldest


def now_timestamp() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Store:
    def __init__(self, path: Path | None = None, history: int = 1000) -> None:
        self.cond = threading.Condition(threading.RLock())
        self.path = path
        self.rv = 1
        self.objects: dict[Key, dict[str, Any]] = {}
        self.history: deque[Event] = deque()
        self.limit = history
        self.compacted = 1  # events after this resourceVersion are all in the history
        self._log: TextIO | None = None
        if path is not None:
            self._open(path)

    # reads (callers hold cond)

    def get(self, key: Key) -> dict[str, Any] | None:
        obj = self.objects.get(key)
        return copy.deepcopy(obj) if obj is not None else None

    def select(self, resource_key: str, namespace: str | None) -> list[dict[str, Any]]:
        """Objects of one resource (in one namespace, or all), sorted as etcd keys are."""
        found = [
            copy.deepcopy(obj)
            for (res, ns, _), obj in sorted(self.objects.items())
            if res == resource_key and (namespace is None or ns == namespace)
        ]
        return found

    def since(self, rv: int) -> list[Event]:
        """Events after ``rv``; TooOld if some of them are no longer kept."""
        if rv < self.compacted:
            raise TooOld(rv, self.compacted)
        return [event for event in self.history if event.rv > rv]

    # writes (callers hold cond)

    def create(self, key: Key, obj: dict[str, Any]) -> dict[str, Any]:
        metadata = obj["metadata"]
        metadata["uid"] = str(uuid.uuid4())
        metadata["creationTimestamp"] = now_timestamp()
        return self._write("ADDED", key, obj, None)

    def update(self, key: Key, obj: dict[str, Any]) -> dict[str, Any]:
        previous = self.objects[key]
        return self._write("MODIFIED", key, obj, previous)

    def delete(self, key: Key) -> dict[str, Any]:
        obj = copy.deepcopy(self.objects[key])
        return self._write("DELETED", key, obj, None)

    def compact(self, upto: int | None = None) -> int:
        """Forget the history up to ``upto`` (default: all of it); the new oldest version."""
        upto = self.rv if upto is None else min(upto, self.rv)
        while self.history and self.history[0].rv <= upto:
            self.history.popleft()
        self.compacted = max(self.compacted, upto)
        self.cond.notify_all()
        return self.compacted

    def _write(
        self, kind: str, key: Key, obj: dict[str, Any], previous: dict[str, Any] | None
    ) -> dict[str, Any]:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        if kind == "DELETED":
            del self.objects[key]
        else:
            self.objects[key] = obj
        self.history.append(Event(self.rv, kind, key, copy.deepcopy(obj), previous))
        while len(self.history) > self.limit:
            self.compacted = self.history.popleft().rv
        self._save(kind, key, obj)
        self.cond.notify_all()
        return copy.deepcopy(obj)

    # the state file: a snapshot line, then one line per write (appending costs one object,
    # where rewriting the file would cost them all); rewritten as one snapshot at each start

    def _save(self, kind: str, key: Key, obj: dict[str, Any]) -> None:
        if self._log is None:
            return
        record = {"rv": self.rv, "key": list(key), "deleted": kind == "DELETED", "object": obj}
        self._log.write(json.dumps(record) + "\n")
        self._log.flush()  # in the page cache, so a SIGKILL loses nothing (no fsync: no crash)

    def _open(self, path: Path) -> None:
        if path.exists():
            for number, line in enumerate(path.read_text().splitlines()):
                try:
                    record = json.loads(line)
                except ValueError:  # a line cut short by a kill: its write was never answered
                    if number == 0:
                        raise ValueError("its first line is not a snapshot") from None
                    continue
                if number == 0:
                    self.rv = int(record["resourceVersion"])
                    self.objects = {(r, ns, name): obj for r, ns, name, obj in record["objects"]}
                    continue
                self.rv = int(record["rv"])
                key = (record["key"][0], record["key"][1], record["key"][2])
                if record["deleted"]:
                    self.objects.pop(key, None)
                else:
                    self.objects[key] = record["object"]
            self.compacted = self.rv
        snapshot = {
            "resourceVersion": self.rv,
            "objects": [[*key, obj] for key, obj in self.objects.items()],
        }
        temporary = path.with_name(path.name + ".tmp")
        temporary.write_text(json.dumps(snapshot) + "\n")
        os.replace(temporary, path)
        self._log = open(path, "a")  # kept open for the life of the process
