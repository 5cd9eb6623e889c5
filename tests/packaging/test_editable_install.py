"""The editable install the README makes (``pip install -e .``) is visible to mypy.

setuptools' default editable install of a flat layout is an import hook that static tools do not
run; pyproject's ``package-dir`` makes it a plain path entry instead. Slow: a scratch venv and
a real ``pip install -e`` (its build backend comes from the package index).
"""

from __future__ import annotations

import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def test_mypy_finds_ha_in_an_editable_install(tmp_path: Path) -> None:
    env = tmp_path / "venv"
    venv.create(env, with_pip=True)
    python = env / "bin" / "python"
    install = subprocess.run(
        [python, "-m", "pip", "install", "-q", "--no-deps", "-e", ROOT],
        capture_output=True,
        text=True,
    )
    if "Could not find a version that satisfies" in install.stderr:
        pytest.skip(f"no package index for the build backend: {install.stderr.strip()[-200:]}")
    assert install.returncode == 0, install.stderr
    user = tmp_path / "elsewhere"
    user.mkdir()
    (user / "t.py").write_text("import ha\nreveal_type(ha.Elector)\n")
    checked = subprocess.run(
        [sys.executable, "-m", "mypy", "--python-executable", python, "--no-incremental", "t.py"],
        cwd=user,
        capture_output=True,
        text=True,
    )
    assert checked.returncode == 0, checked.stdout
    assert 'Revealed type is "def (driver: ha.drivers.base.Driver' in checked.stdout
