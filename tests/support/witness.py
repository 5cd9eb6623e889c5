"""The witness: what the contenders did, judged from outside the elector (a Jepsen checker).

Every contender appends to one shared file (O_APPEND, one ``write(2)`` per line, so a line is
whole or absent) and, for each act, makes one fenced store write:

- ``act``: ``begin`` is read just before ``lease.valid`` is asked, ``end`` just after, and the
  line is appended right away only if it said yes. The append *is* the act on the shared
  resource; its place in the file is the resource's own order, its times are CLOCK_MONOTONIC
  (one clock for every process of the host).
- ``write``: the act's record appended to ``/witness`` in one transaction behind
  ``lease.fence_ops()`` (``ha.stores``' ``Writer``): a sequence number ``n`` (the ``/witness``
  node's version, compare-and-set) and ``/witness/<n>`` holding the epoch, the act and ``sent``,
  the time the transaction was sent. The line says whether it landed (``n``) or was refused.

``verdict`` checks the file and what landed in the backend, knowing the pauses (SIGSTOP) the
harness inflicted. It returns violations (empty when all is well). The fenced writes are a
compare-and-set register, so their history is linearizable exactly when what landed is
gap-free, holds every acknowledged write and no refused one, and its commit order agrees with
real time (a write acknowledged before another was sent commits before it): four linear
checks, no search, unlike a general checker such as Porcupine.
"""

from __future__ import annotations

import bisect
import json
import math
import os
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ha.drivers.base import Create, Driver, SetData
from ha.election.lease import Lease
from ha.errors import BadVersion, Fenced, HAError, NodeExists, NoNode, TransactionFailed
from ha.stores.fencing import Writer
from tests.support.namespaces import host_clock

ROOT = "/witness"

# the witness's clock: CLOCK_MONOTONIC, one clock for every process of the host; a contender
# whose own clocks are skewed (a time namespace, libfaketime: tests/netns) is started with
# HA_WITNESS_HOST_CLOCK=1 and reads the host's through ``host_clock``
now = host_clock if os.environ.get("HA_WITNESS_HOST_CLOCK") else time.monotonic


class Witness:
    """One contender's hand on the witness file and the witness records in the store."""

    def __init__(self, path: str | os.PathLike[str], identity: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.identity = identity
        self.pid = os.getpid()
        self.count = 0
        self.declined = 0  # acts not done because lease.valid said no

    def close(self) -> None:
        os.close(self.fd)

    def _line(self, **fields: Any) -> None:
        os.write(self.fd, (json.dumps(fields, separators=(",", ":")) + "\n").encode())

    def note(self, kind: str, **fields: Any) -> None:
        """A line the verdict does not judge (a contender's own stall, for the figures)."""
        self._line(kind=kind, identity=self.identity, pid=self.pid, t=now(), **fields)

    def act(self, lease: Lease, valid: bool | None = None) -> str | None:
        """Act once if the lease says so; the act's id, or None. ``valid`` overrides the lease
        (the harness's self-test plays a broken contender with it)."""
        begin = now()
        ok = lease.valid if valid is None else valid
        end = now()
        if not ok:
            self.declined += 1
            return None
        self.count += 1
        act = f"{self.identity}/{self.pid}/{self.count}"
        self._line(
            kind="act",
            act=act,
            identity=self.identity,
            pid=self.pid,
            epoch=lease.epoch,
            sid=lease.session_id,
            begin=begin,
            end=end,
        )
        return act

    async def write(self, driver: Driver, lease: Lease, act: str, fenced: bool = True) -> str:
        """The act's fenced store write: 'landed', 'refused' (fenced) or 'unknown'."""
        writer = Writer(driver, lease)
        for _ in range(5):
            sent = now()
            try:
                _, stat = await driver.get(ROOT)
                n = stat.version
                record = {"act": act, "epoch": lease.epoch, "sent": sent, "pid": self.pid}
                ops = [
                    SetData(ROOT, b"", n),
                    Create(f"{ROOT}/{n:09d}", json.dumps(record).encode()),
                ]
                if fenced:
                    await writer.commit(ops)
                else:  # the self-test's broken contender
                    await driver.transaction(ops)
            except Fenced:
                self._line(kind="write", act=act, epoch=lease.epoch, sent=sent, result="refused")
                return "refused"
            except TransactionFailed as exc:
                if isinstance(exc.cause, BadVersion | NodeExists):
                    continue  # another writer took this number: take the next one
                break
            except (HAError, OSError):
                break
            done = now()
            self._line(
                kind="write", act=act, epoch=lease.epoch, sent=sent, done=done, result="landed", n=n
            )
            return "landed"
        self._line(kind="write", act=act, epoch=lease.epoch, sent=sent, result="unknown")
        return "unknown"


async def prepare(driver: Driver) -> None:
    """Create the witness's node in a fresh namespace."""
    try:
        await driver.create(ROOT, b"")
    except NodeExists:
        pass


async def landed(driver: Driver) -> list[dict[str, Any]]:
    """The records that landed, in commit order, each with its ``n``."""
    try:
        names = await driver.children(ROOT)
    except NoNode:
        return []
    records = []
    for name in sorted(names):  # zero-padded: name order is commit order
        data, _ = await driver.get(f"{ROOT}/{name}")
        records.append({**json.loads(data), "n": int(name)})
    return records


def read_lines(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The witness file's lines in append order (a killed writer's partial line is dropped)."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in text.split("\n")[:-1] if line]


# --- the verdict -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Violation:
    kind: str
    text: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.text}"


@dataclass
class Figures:
    acts: int = 0
    excused: int = 0  # acts the file cannot judge (see excused_acts)
    landed: int = 0
    refused: int = 0
    unknown: int = 0
    epochs: int = 0
    stalls: int = 0  # the contenders' own loop stalls
    identities: set[str] = field(default_factory=set)


def _describe(a: dict[str, Any]) -> str:
    return (
        f"{a['identity']} (pid {a['pid']}) epoch {a['epoch']} at [{a['begin']:.3f}, {a['end']:.3f}]"
    )


def excused_acts(
    acts: list[dict[str, Any]],
    stops: Iterable[tuple[int, float]] = (),
    expiries: Iterable[tuple[str, float]] = (),
    window: float = 0.0,
) -> set[str]:
    """Acts the file cannot judge, whose fenced writes are still judged:

    - a SIGSTOP (pid, time) may have caught the last act a process began before it between its
      check and its append: nothing keeps a check-then-act on an unfenced resource safe there;
    - a session expired by force (identity, time), against the timing assumption (no expiry
      sooner than the session timeout after the last contact): that identity's acts for
      ``window`` seconds after it (it cannot know before its own deadline)."""
    begins: dict[int, list[tuple[float, str]]] = defaultdict(list)
    for a in acts:
        begins[a["pid"]].append((a["begin"], a["act"]))
    out = set()
    for pid, t in stops:
        before = [act for begin, act in begins.get(pid, []) if begin <= t]
        if before:
            out.add(before[-1])  # lines of one process are in its own order
    for identity, t in expiries:
        out |= {
            a["act"] for a in acts if a["identity"] == identity and t <= a["begin"] <= t + window
        }
    return out


def verdict(
    lines: list[dict[str, Any]],
    records: list[dict[str, Any]],
    *,
    stops: Iterable[tuple[int, float]] = (),
    expiries: Iterable[tuple[str, float]] = (),
    window: float = 0.0,
    epochs_seen: Iterable[tuple[float, int]] = (),
    healed_at: float | None = None,
    live_within: float = 0.0,
    figures: Figures | None = None,
) -> list[Violation]:
    """Judge a run. ``lines``: the witness file; ``records``: what landed (``landed``);
    ``stops``, ``expiries``, ``window``: see ``excused_acts``; ``epochs_seen``: (time, epoch)
    readings of the epoch node from outside (the epoch was at least that by then);
    ``healed_at``: when the faults stopped (an act must begin within ``live_within`` after)."""
    figures = figures if figures is not None else Figures()
    out: list[Violation] = []
    acts = [x for x in lines if x["kind"] == "act"]
    writes = [x for x in lines if x["kind"] == "write"]
    excused = excused_acts(acts, stops, expiries, window)
    figures.acts, figures.excused = len(acts), len(excused)
    figures.identities = {a["identity"] for a in acts}
    figures.stalls = sum(x["kind"] == "stall" for x in lines)
    strict = [a for a in acts if a["act"] not in excused]

    # one identity per epoch
    owner: dict[int, str] = {}
    for a in acts:
        if owner.setdefault(a["epoch"], a["identity"]) != a["identity"]:
            text = f"epoch {a['epoch']} acted by {owner[a['epoch']]} and {_describe(a)}"
            out.append(Violation("epoch", text))
    figures.epochs = len(owner)

    # no two identities act in overlapping time: a tenure runs from the first act of an
    # identity with an epoch to its last one
    tenures: dict[tuple[str, int], dict[str, Any]] = {}
    for a in strict:
        t = tenures.setdefault((a["identity"], a["epoch"]), dict(a))
        t["end"] = max(t["end"], a["end"])
    reach = None  # the tenure that ends last so far
    for t in sorted(tenures.values(), key=lambda t: t["begin"]):
        if reach is not None and reach["identity"] != t["identity"] and t["begin"] <= reach["end"]:
            out.append(Violation("overlap", f"{_describe(reach)} and {_describe(t)}"))
        if reach is None or t["end"] > reach["end"]:
            reach = t

    # in the file's own order, epochs never go back (a late append shows here)
    prev = None
    for a in strict:
        if prev is not None and a["epoch"] < prev["epoch"]:
            out.append(Violation("epoch order", f"{_describe(a)} appended after {_describe(prev)}"))
        prev = a

    # fenced writes: in commit order, gap-free and never an older epoch after a newer one
    seen: list[tuple[float, int]] = sorted(epochs_seen)
    seen += [(a["end"], a["epoch"]) for a in acts]
    seen.sort()
    for i, r in enumerate(records):
        if r["n"] != i:
            out.append(Violation("lost write", f"write number {i} is missing (found {r['n']})"))
            break
    top = None
    for r in records:
        if top is not None and r["epoch"] < top["epoch"]:
            out.append(
                Violation(
                    "deposed write",
                    f"write {r['n']} of epoch {r['epoch']} ({r['act']}) landed after write "
                    f"{top['n']} of epoch {top['epoch']} ({top['act']})",
                )
            )
        if top is None or r["epoch"] > top["epoch"]:
            top = r
    # a write sent once a newer epoch was in force must not land: the newest epoch known
    # by each reading time (readings from outside, and the acts: an act's epoch was won before)
    times, best = [], []
    for t, e in seen:
        times.append(t)
        best.append(max(e, best[-1]) if best else e)
    for r in records:
        i = bisect.bisect_right(times, r["sent"]) - 1
        if i >= 0 and best[i] > r["epoch"]:
            out.append(
                Violation(
                    "deposed write",
                    f"write {r['n']} of epoch {r['epoch']} ({r['act']}) sent at {r['sent']:.3f} "
                    f"landed though epoch {best[i]} was in force by then",
                )
            )

    # no acknowledged write is lost
    by_n = {r["n"]: r for r in records}
    for w in writes:
        if w["result"] == "landed" and by_n.get(w["n"], {}).get("act") != w["act"]:
            out.append(
                Violation(
                    "lost write", f"write {w['n']} of {w['act']} was acknowledged and is gone"
                )
            )
    # a refused write never lands: Fenced means nothing of the transaction was applied
    refused = {w["act"] for w in writes if w["result"] == "refused"}
    for r in records:
        if r["act"] in refused:
            out.append(
                Violation(
                    "refused write",
                    f"write {r['n']} of {r['act']} landed, though its writer was told it was"
                    " refused (fenced)",
                )
            )

    # linearizable (a register behind a compare-and-set): the commit order agrees with real
    # time, so no write was acknowledged before a write numbered below it had been sent
    done = {w["n"]: w["done"] for w in writes if w["result"] == "landed"}
    first = None  # of the writes numbered so far, the one sent last
    for r in records:
        if first is not None and done.get(r["n"], math.inf) < first["sent"]:
            out.append(
                Violation(
                    "real-time order",
                    f"write {r['n']} ({r['act']}) was acknowledged at {done[r['n']]:.3f}, before"
                    f" write {first['n']} ({first['act']}) was sent at {first['sent']:.3f},"
                    " yet committed after it",
                )
            )
        if first is None or r["sent"] > first["sent"]:
            first = r
    figures.landed = len(records)
    figures.refused = sum(w["result"] == "refused" for w in writes)
    figures.unknown = sum(w["result"] == "unknown" for w in writes)

    # liveness: some contender acts soon after the faults stop
    if healed_at is not None:
        after = [a["begin"] for a in acts if a["begin"] >= healed_at]
        if not after or min(after) > healed_at + live_within:
            first = f"first at +{min(after) - healed_at:.2f}s" if after else "none at all"
            out.append(
                Violation("liveness", f"no act within {live_within:.1f}s of healing ({first})")
            )
    return out
