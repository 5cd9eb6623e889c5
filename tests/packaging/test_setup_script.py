"""scripts/_setup.sh, which the README's two commands source, on the machines it must handle.

A fresh Debian may have no java, an old one (PySpark 4 needs 17+), or a default JRE newer than
17; `java` and `apt-cache` are replaced by small scripts on PATH that print what those would.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

SETUP = Path(__file__).resolve().parents[2] / "scripts" / "_setup.sh"


def _run(tmp_path: Path, call: str, fakes: dict[str, str], path: str = "/usr/bin:/bin") -> str:
    """Source the script and run `call` with fake commands: name -> what it prints (java's
    banner goes to stderr, as java prints it; anything else to stdout)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in fakes.items():
        stream = " >&2" if name == "java" else ""
        script = bin_dir / name
        script.write_text(f"#!/bin/sh\ncat <<'X'{stream}\n{text}\nX\n")
        script.chmod(0o755)
    done = subprocess.run(
        ["/bin/bash", "-c", f'. {SETUP}; echo "[$({call})]"'],
        env={"PATH": f"{bin_dir}:{path}"},
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


@pytest.mark.parametrize(
    ("banner", "major"),
    [
        ('java version "1.8.0_292"', "8"),
        ('openjdk version "11.0.20" 2023-07-18', "11"),
        ('openjdk version "17.0.15" 2025-04-15', "17"),
        ('openjdk version "21.0.2" 2024-01-16', "21"),
    ],
)
def test_java_major_reads_both_version_styles(tmp_path: Path, banner: str, major: str) -> None:
    assert _run(tmp_path, "java_major", {"java": banner}) == f"[{major}]"


def test_java_major_is_empty_without_java(tmp_path: Path) -> None:
    assert _run(tmp_path, "java_major", {}, path="/nonexistent") == "[]"


def _policy(candidate: str) -> str:
    return f"default-jre-headless:\n  Installed: (none)\n  Candidate: {candidate}\n"


@pytest.mark.parametrize(
    ("candidate", "package"),
    [
        ("2:1.17-74", "default-jre-headless"),  # bookworm
        ("2:1.21-76", "default-jre-headless"),  # trixie
        ("2:1.11-72", "openjdk-17-jre-headless"),  # bullseye: default too old
        ("(none)", "openjdk-17-jre-headless"),  # lists not updated yet
    ],
)
def test_jre_package_takes_the_default_only_when_new_enough(
    tmp_path: Path, candidate: str, package: str
) -> None:
    assert _run(tmp_path, "jre_package", {"apt-cache": _policy(candidate)}) == f"[{package}]"
