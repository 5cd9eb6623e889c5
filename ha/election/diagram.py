"""The machine's pictures, drawn from its tables (as h11's ``make-state-diagrams.py``).

``public_diagram()`` draws the four public states and the changes ``LEGAL`` allows.
``diagram()`` draws the phases from ``MOVES``: each move an arrow labelled with its inputs.
``moves()`` finds the same moves by running the handlers: for every (input, phase) pair that
``HANDLED`` declares, a machine is put in that phase in each of its ``situations`` (with a
session or not, connected or not, holding on or not, retries left or not, what its watch and
the pause said) and fed the input with every variant of its fields. The table test holds the
two equal, so the picture cannot drift from the table or from the handlers it guards. ``python -m ha.election.diagram``
prints ``docs/states.md``; a test keeps that file current.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator
from typing import Any

from . import events as ev
from .machine import Machine
from .names import Breadcrumb, encode_breadcrumb
from .phases import HANDLED, HELD, LEADING, LEGAL, MOVES, PUBLIC, Phase, State

__all__ = ("declared", "diagram", "document", "moves", "public_diagram", "situations")

ME, OTHER = b"me", b"other"
SESSION, NEW_SESSION = 1, 2

# the values each field of an input may take, by its annotation
_CRUMBS = (None, encode_breadcrumb(Breadcrumb(ME, 1)), encode_breadcrumb(Breadcrumb(OTHER, 1)))
# the queue as the machine may have seen it: a leader below us, or two nodes below
LEADER, MIDDLE, MINE = "other_1_0000000001", "third_1_0000000002", "me_1_0000000003"
_BELOW = ((), (LEADER,), (LEADER, MIDDLE))
# what a machine may know besides its phase, where that knowledge decides: the leader's node
# as its watch read it (strays, breadcrumb, breadcrumb seen gone: P6, P7) and the pause (P16:
# paused, and changes of it since the read was asked for)
_KNOWN: tuple[tuple[bool, bytes | None, bool, bool | None, int], ...] = (
    (True, None, False, False, 0),
    (False, _CRUMBS[2], False, False, 0),
    (False, None, True, False, 0),
    (False, _CRUMBS[2], False, None, 0),
    (False, None, True, True, 0),
    (True, None, False, None, 1),
)
_KNOWING = frozenset(
    {Phase.WATCHING, Phase.STANDBY, Phase.REQUEUING, Phase.READING, Phase.FENCING, Phase.PAUSED}
)
_VALUES: dict[str, tuple[object, ...]] = {
    "bool": (False, True),
    "bytes": (OTHER, ME),
    "bytes | None": _CRUMBS,
    "int | None": (None, 0),
    "str": ("x",),
    "node": (LEADER, MIDDLE, MINE),
    "ticket": ("other_1", "me_1"),
    "below": _BELOW,
    "crumbs": ((), (("other_1", _CRUMBS[2]),), (("me_0", _CRUMBS[1]),)),
}


def situations(phase: Phase, cls: type[ev.Input]) -> Iterator[tuple[Machine, ev.Input]]:
    """A fresh machine in ``phase`` and one ``cls`` input for it, in every combination."""
    fields = dataclasses.fields(cls)
    sessions = (SESSION, NEW_SESSION) if cls is ev.Connected else (SESSION,)
    choices = [_field_values(f, sessions) for f in fields]
    contact: tuple[tuple[int | None, bool], ...] = (
        (SESSION, True),
        (SESSION, False),
        (None, False),
    )
    knowing = _KNOWN if phase in _KNOWING else _KNOWN[:1]
    for session, connected in contact:
        for hold, retries, below, known, values in itertools.product(
            (True, False), (5, 0), _BELOW, knowing, itertools.product(*choices)
        ):
            mach = Machine(ME, max_retries=retries, hold_on_disconnect=hold)
            mach.session, mach.connected = session, connected
            mach.phase, mach.reported = phase, PUBLIC[phase]
            mach.epoch = 1 if phase in LEADING else None
            mach.backoff_token = 1
            if phase not in (Phase.IDLE, Phase.CONNECTING, Phase.BACKOFF, Phase.FENCED):
                mach.ticket, mach.node, mach.token = "me_1", MINE, 1
                mach.below = () if phase in LEADING else below
            if phase is Phase.FENCING:
                mach.to_fence = (_CRUMBS[2],)
            strays, crumb, gone, paused, changed = known
            if mach.below:  # what the watch of the leader's node said
                mach.strays, mach.crumb, mach.crumb_gone = strays, crumb, gone
            mach.paused, mach.pause_changes = paused, changed
            kwargs: dict[str, Any] = {f.name: v for f, v in zip(fields, values, strict=True)}
            yield mach, cls(**kwargs)


def _field_values(
    field: dataclasses.Field[object], sessions: tuple[int, ...]
) -> tuple[object, ...]:
    if field.name == "session":
        return sessions
    if field.name in ("epoch", "token"):
        return (1,)  # the machine's own: an older lease's or timer's is ignored
    return _VALUES.get(field.name) or _VALUES.get(str(field.type), (0,))


def moves() -> dict[tuple[Phase, Phase], set[str]]:
    """(from, to) -> the names of the inputs that take the machine from one to the other, found
    by running the handlers in every situation (the table test holds ``MOVES`` to this)."""
    found: dict[tuple[Phase, Phase], set[str]] = {}
    for cls, phases in HANDLED.items():
        for phase in phases:
            for mach, event in situations(phase, cls):
                mach.handle(event)
                if mach.phase is not phase:
                    found.setdefault((phase, mach.phase), set()).add(cls.__name__)
    return found


def declared() -> dict[tuple[Phase, Phase], set[str]]:
    """The same, read from ``MOVES`` alone."""
    found: dict[tuple[Phase, Phase], set[str]] = {}
    for cls, table in MOVES.items():
        for phase, targets in table.items():
            for target in targets:
                found.setdefault((phase, target), set()).add(cls.__name__)
    return found


def diagram() -> str:
    """The phases and the inputs that move the machine between them, as a Mermaid diagram."""
    order = list(Phase)
    lines = ["stateDiagram-v2", f"    [*] --> {Phase.IDLE.value}"]
    for (old, new), names in sorted(
        declared().items(), key=lambda m: (order.index(m[0][0]), order.index(m[0][1]))
    ):
        lines.append(f"    {old.value} --> {new.value}: {', '.join(sorted(names))}")
    lines += [f"    {p.value} --> [*]" for p in (Phase.DONE, Phase.FAILED)]
    return "\n".join(lines) + "\n"


def public_diagram() -> str:
    """The public states and their legal transitions, as a Mermaid state diagram."""
    lines = ["stateDiagram-v2", "    [*] --> neutral"]
    for old, new in sorted(LEGAL, key=lambda t: (t[0].value, t[1].value)):
        lines.append(f"    {old.value} --> {new.value}")
    for state in State:
        phases = ", ".join(p.value for p, s in PUBLIC.items() if s is state)
        if state is State.STANDBY:  # P15: taking over shows the state it began in
            phases += ", " + ", ".join(
                f"{p.value} (entered as standby)" for p in Phase if p in HELD
            )
        lines.append(f"    note right of {state.value}: phases {phases}")
    return "\n".join(lines) + "\n"


def document() -> str:
    """``docs/states.md``: both diagrams and the table they come from."""
    rows = "\n".join(
        f"| `{cls.__name__}` | {', '.join(p.value for p in Phase if p in phases)} |"
        for cls, phases in HANDLED.items()
    )
    return f"""# The elector's states

Generated by `python -m ha.election.diagram` from the tables in `ha/election/phases.py`;
a test keeps it current.

## Public states

What a contender is told, and the changes `LEGAL` allows (each phase shows as one state).

```mermaid
{public_diagram()}```

## Phases

Where the machine is. An arrow is labelled with the inputs that can take it; inputs that act
without moving the machine (a re-check, a recorded disconnection) draw no arrow.

```mermaid
{diagram()}```

## Which phases act on each input (`HANDLED`)

An input in any other phase changes nothing: it is stale or irrelevant there.

| input | phases |
|---|---|
{rows}
"""


if __name__ == "__main__":
    print(document(), end="")
