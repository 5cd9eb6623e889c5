"""Journals with a known answer, shared by the report's tests."""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ("EVERY_CASE", "write_every_case")

KEYS = ("ts", "election", "identity", "from", "to", "epoch", "cause")
T = 1_790_000_000.0
EVERY_CASE = [
    (T + 0.0, "/a", "x", "neutral", "active", 1, "first", {"session_timeout": 4.0}),
    (T + 0.5, "/a", "y", "neutral", "standby", None, "behind", {}),
    # x killed; y found the lock free at 6.0, the backend sees a death within 0.1 s
    (
        T + 6.05,
        "/a",
        "y",
        "standby",
        "active",
        2,
        "won",
        {"vacant_since": T + 6.0, "detection": 0.1},
    ),
    # y frozen past its deadline (20.0), thawed at 23.0: z took over at 21.0
    (T + 9.0, "/a", "z", "neutral", "standby", None, "behind", {}),
    (T + 21.0, "/a", "z", "standby", "active", 3, "won", {"session_timeout": 4.0}),
    (T + 23.0, "/a", "y", "active", "neutral", None, "deadline", {"until": T + 20.0}),
    # z killed; x (restarted) takes over with no dating fields: z's end assumed 4 s (the
    # session timeout z recorded) before x's start
    (T + 30.0, "/a", "x", "neutral", "standby", None, "rejoined", {}),
    (T + 40.0, "/a", "x", "standby", "active", 5, "won", {}),
    (T + 50.0, "/a", "x", "active", "neutral", None, "quit", {}),
    # y active with a lower epoch than x had: an epoch error
    (T + 50.5, "/a", "y", "neutral", "active", 4, "won", {}),
    (T + 51.0, "/a", "y", "active", "neutral", None, "quit", {}),
    # a second election: an overlap, and a killed active restarted before any successor
    (T + 100.0, "/b", "p", "neutral", "active", 7, "won", {}),
    (T + 101.0, "/b", "q", "neutral", "active", 8, "won", {}),
    (T + 102.0, "/b", "p", "active", "neutral", None, "quit", {}),
    (T + 110.0, "/b", "q", "neutral", "standby", None, "restarted", {}),
    (T + 115.0, "/b", "q", "standby", "neutral", None, "quit", {}),
]


def write_every_case(path: Path) -> Path:
    with path.open("w") as f:
        for *row, extra in EVERY_CASE:
            f.write(json.dumps(dict(zip(KEYS, row, strict=True)) | extra) + "\n")
        f.write("not json\n")
        f.write('{"ts": "soon", "election": "/a"}\n')
    return path
