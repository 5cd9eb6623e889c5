"""The sqlite driver's clock: the host's CLOCK_MONOTONIC read from any time namespace.

The readings are taken by real processes in real time namespaces (``unshare --time``) and
compared with this process's own; what cannot be corrected is refused in one line: a process
that made a time namespace for its children only, and a process without ``/proc``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ha.drivers.sqlite import clock
from ha.errors import ConfigurationError
from tests.support.cli import ha_env, one_error_line, sqlite_url
from tests.support.namespaces import host_monotonic, refused, unshare

REPO = Path(__file__).resolve().parents[2]

READ = """
from ha.drivers.sqlite import clock
reading = clock.now()
print(clock.offset(), reading.host, reading.local)
"""

# unshare(CLONE_NEWTIME) in the process itself: its children's namespace is new, it stays in
# its own; the new namespace gets an offset before anyone is in it (as `unshare -T` does)
UNSHARED = """
import ctypes, os, sys
import anyio
from ha.drivers.sqlite.driver import SqliteDriver
from ha.errors import ConfigurationError

if ctypes.CDLL(None, use_errno=True).unshare(0x80) != 0:  # CLONE_NEWTIME
    sys.exit("unshare: " + os.strerror(ctypes.get_errno()))
with open("/proc/self/timens_offsets", "w") as f:
    f.write("monotonic 5000 0\\n")

async def main():
    try:
        async with SqliteDriver(sys.argv[1]):
            print("started")
    except ConfigurationError as exc:
        print(exc)

anyio.run(main)
"""


@pytest.mark.parametrize(
    ("text", "offset"),
    [
        (b"monotonic           0         0\nboottime            0         0\n", 0.0),
        (b"monotonic      100000         0\nboottime       604800         0\n", 100_000.0),
        # negative seconds, positive nanoseconds (the kernel's timespec): -100 + 0.5
        (b"boottime 7 0\nmonotonic        -100 500000000\n", -99.5),
    ],
)
def test_the_monotonic_offset_is_read_from_its_line(text: bytes, offset: float) -> None:
    assert clock.parse_offset(text) == offset


@pytest.mark.parametrize(
    "text", [b"", b"boottime 0 0\n", b"monotonic x 0\n", b"monotonic 1\n", b"\xff\xfe"]
)
def test_an_offsets_file_without_a_monotonic_offset_is_refused(text: bytes) -> None:
    with pytest.raises(ConfigurationError, match="timens_offsets has no monotonic offset"):
        clock.parse_offset(text)


def host_reading_in(offset: int) -> tuple[float, float, float]:
    """(offset, host, local) as read by a process in a time namespace ``offset`` s from the
    host's."""
    flags = ("--time", f"--monotonic={offset}")
    if refused(*flags):
        pytest.skip(str(refused(*flags)))
    out = subprocess.run(
        [*unshare(*flags), sys.executable, "-c", READ],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    found, host, local = map(float, out.split())
    return found, host, local


@pytest.mark.parametrize("direction", ["ahead", "behind"])
def test_a_reading_in_a_time_namespace_is_on_the_host_clock(direction: str) -> None:
    # behind: as far back as the host's clock allows (a namespace's clock cannot be negative)
    offset = 100_000 if direction == "ahead" else -int(host_monotonic() // 2)
    before = host_monotonic()
    found, host, local = host_reading_in(offset)
    after = host_monotonic()
    assert found == offset
    assert before <= host <= after  # on our clock, though the child's reads `offset` off
    assert not before <= local <= after


def test_a_process_outside_the_namespace_it_describes_is_refused(tmp_path: Path) -> None:
    if refused("--time"):
        pytest.skip(str(refused("--time")))
    result = subprocess.run(
        [sys.executable, "-c", UNSHARED, str(tmp_path / "ha.db")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("this process is not in the time namespace that"), result
    assert "run it in a child process" in result.stdout


def test_ha_run_without_proc_says_why_in_one_line(tmp_path: Path) -> None:
    """Nothing tells a process without /proc its time namespace: refused, not guessed."""
    flags = ("--mount", "--propagation=private")
    if refused(*flags):
        pytest.skip(str(refused(*flags)))
    env = ha_env(tmp_path, HA_URL=sqlite_url(tmp_path))
    argv = [sys.executable, "-m", "ha", "run", "/svc", "--id", "a", "--", "true"]
    result = subprocess.run(
        [*unshare(*flags), "sh", "-c", 'umount -l /proc && exec "$@"', "sh", *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    line = one_error_line(result)
    assert line.startswith("ha: error: cannot read /proc/self/timens_offsets"), line
    assert "needs /proc mounted" in line
