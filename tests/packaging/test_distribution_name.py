"""Every install hint names this project's own distribution, never another project's.

The distribution was called ``ha``, which on the public package index is an unrelated project
(whose top-level package is also ``ha``): `pip install` with the hints of the README, the
Kubernetes manifest and the error lines installed it. The name is read from pyproject.toml, so
a hint cannot drift from it again.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

from ha._install import DISTRIBUTION, install_hint
from tests.support.cli import ha, ha_env, one_error_line

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
NAME: str = PROJECT["name"]
EXTRAS = set(PROJECT["optional-dependencies"])

# NAME[extra,...]: a distribution named with extras (`.[dev]`, a path, has no name before it)
WITH_EXTRAS = re.compile(r"([A-Za-z0-9][\w.-]*)\[([\w,-]+)\]")
SOURCES = ("ha", "README.md", "deploy", "docs", "scripts", "benchmarks", "tests", ".ci")


def text_files() -> list[Path]:
    found = []
    for name in SOURCES:
        top = ROOT / name
        for path in [top] if top.is_file() else sorted(top.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                found.append(path)
    return found


def named_with_extras(text: str) -> list[str]:
    """Each ``NAME[extras]`` in ``text`` whose extras are all this project's."""
    return [m.group(0) for m in WITH_EXTRAS.finditer(text) if set(m.group(2).split(",")) <= EXTRAS]


def test_the_distribution_is_named_in_one_place_and_not_ha() -> None:
    assert DISTRIBUTION == NAME
    # `ha` on the public index is someone else's project (its summary: "joke tools")
    assert NAME != "ha"


def test_the_extras_pattern_finds_a_hint_and_skips_a_path() -> None:
    other = "h" + "a"  # (spelled so, this file holds no hint of its own)
    assert named_with_extras(f"pip install '{other}[spark]'") == [f"{other}[spark]"]
    assert named_with_extras("pip install -e '.[dev,spark]'") == []
    assert named_with_extras("--master local[2]") == []


def test_every_name_with_an_extra_is_this_distribution() -> None:
    wrong = [
        f"{path.relative_to(ROOT)}: {found}"
        for path in text_files()
        for found in named_with_extras(path.read_text(errors="replace"))
        if not found.startswith(f"{NAME}[")
    ]
    assert wrong == []


def test_the_package_spells_pip_install_in_one_place() -> None:
    # every hint in ha/ comes from install_hint, which the tests below see in real error lines
    spelled = [
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / "ha").rglob("*.py"))
        if "pip install" in path.read_text()
    ]
    assert spelled == ["ha/_install.py"]


def test_the_version_is_this_distribution_s_or_says_it_is_not_installed(tmp_path: Path) -> None:
    # this checkout's `ha` may run beside an install of another name (a venv made before the
    # rename) or none at all: a line either way, never a traceback
    try:
        expected = metadata.version(NAME)
    except metadata.PackageNotFoundError:
        expected = f"unknown ({NAME} is not installed)"
    shown = ha("--version", env=ha_env(tmp_path))
    assert (shown.returncode, shown.stdout, shown.stderr) == (0, f"ha, version {expected}\n", "")


@pytest.mark.parametrize(
    ("module", "url", "extra"),
    [
        ("kazoo", "zk://127.0.0.1:1/ha", "zookeeper"),
        ("httpx", "k8s://default/ha", "kubernetes"),
        ("yaml", "k8s://default/ha", "kubernetes"),
    ],
)
def test_a_missing_client_library_names_the_extra_to_install(
    tmp_path: Path, module: str, url: str, extra: str
) -> None:
    # the library made unimportable, as on a machine without the extra; the real command
    missing = tmp_path / "missing" / module
    missing.mkdir(parents=True)
    (missing / "__init__.py").write_text(
        f"raise ModuleNotFoundError(\"No module named '{module}'\", name={module!r})\n"
    )
    env = ha_env(tmp_path, PYTHONPATH=str(missing.parent))
    for args in (["status", "/x"], ["run", "/x", "--id", "a", "--", "true"]):
        line = one_error_line(ha("--url", url, *args, env=env))
        assert line.endswith(f": pip install '{NAME}[{extra}]'"), line
        assert line.endswith(install_hint(extra)), line


@pytest.mark.slow
def test_the_setup_scripts_replace_the_old_name_in_a_venv(tmp_path: Path) -> None:
    # a .venv made before the rename (the tree installed as `ha`), then what scripts/demo and
    # scripts/test do in it (scripts/_setup.sh, then `pip install -e .`): one distribution
    # left, this one, whose `ha` command runs. Slow: a real venv, dependencies from the index.
    tree = tmp_path / "tree"
    tree.mkdir()
    shutil.copy(ROOT / "README.md", tree)  # pyproject's readme
    shutil.copytree(ROOT / "scripts", tree / "scripts")
    shutil.copytree(ROOT / "ha", tree / "ha", ignore=shutil.ignore_patterns("__pycache__"))
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert f'\nname = "{NAME}"\n' in pyproject
    (tree / "pyproject.toml").write_text(pyproject.replace(f'name = "{NAME}"', 'name = "ha"'))

    def sh(line: str) -> str:
        done = subprocess.run(
            ["bash", "-c", f"set -euo pipefail; . scripts/_setup.sh; {line}"],
            cwd=tree,
            capture_output=True,
            text=True,
            env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        )
        if "Could not find a version that satisfies" in done.stderr:
            pytest.skip(f"no package index here: {done.stderr.strip()[-200:]}")
        assert done.returncode == 0, done.stderr
        return done.stdout

    sh("make_venv && .venv/bin/pip install -q -e .")
    assert "Name: ha\n" in sh(".venv/bin/pip show ha")
    (tree / "pyproject.toml").write_text(pyproject)
    said = sh("make_venv; drop_old_name; .venv/bin/pip install -q -e .")
    assert "removing the distribution 'ha'" in said
    owners = sh(
        ".venv/bin/python -c 'import importlib.metadata as m;"
        ' print(sorted(set(m.packages_distributions()["ha"])))\''
    )
    assert owners.strip() == str([NAME])
    assert "Usage: ha [OPTIONS] COMMAND" in sh(".venv/bin/ha --help")
    assert sh(".venv/bin/ha --version").strip() == f"ha, version {PROJECT['version']}"
    assert sh("drop_old_name") == ""  # once gone, nothing to do
