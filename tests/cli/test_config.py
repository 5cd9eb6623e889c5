"""The config file through the real command: which file is read (--config, HA_CONFIG, the
search path), the precedence flag > environment > file > default, and one-line errors that
name the file and the key."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ha.cli import cli
from ha.cli.config import find_config, load_config
from ha.errors import ConfigurationError
from tests.support.cli import ha, ha_env, one_error_line, wait_until


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return ha_env(tmp_path, XDG_CONFIG_HOME=str(tmp_path / "xdg"))


def used_url(result: subprocess.CompletedProcess[str]) -> str:
    """The sqlite file `ha status` looked for (read-only: a missing file is an error naming it,
    and nothing is created)."""
    found = re.search(r"no ha database at (\S+)", one_error_line(result))
    assert found, result.stderr
    return Path(found.group(1)).name


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_flag_beats_environment_beats_file(tmp_path: Path, env: dict[str, str]) -> None:
    config = write(tmp_path / "c.toml", f'url = "sqlite://{tmp_path}/from-file.db"\n')
    assert used_url(ha("--config", str(config), "status", "/p", env=env)) == "from-file.db"
    env["HA_URL"] = f"sqlite://{tmp_path}/from-env.db"
    assert used_url(ha("status", "/p", "--config", str(config), env=env)) == "from-env.db"
    flag = f"sqlite://{tmp_path}/from-flag.db"
    result = ha("status", "/p", "--url", flag, "--config", str(config), env=env)
    assert used_url(result) == "from-flag.db"
    assert not list(tmp_path.glob("*.db"))  # read-only commands create nothing


def test_a_commands_table_gives_its_options(tmp_path: Path, env: dict[str, str]) -> None:
    """[run] grace = 2 is --grace 2; a flag wins over it (the grace check names the value)."""
    url = f"sqlite://{tmp_path}/ha.db?session_timeout=2"
    config = write(tmp_path / "c.toml", f'url = "{url}"\n[run]\nid = "a"\ngrace = 2\n')
    env["HA_CONFIG"] = str(config)
    result = ha("run", "/p", "--", "true", env=env)  # --id comes from the file
    assert "--grace 2s leaves no time" in one_error_line(result)
    result = ha("run", "/p", "--grace", "3", "--", "true", env=env)
    assert "--grace 3s leaves no time" in one_error_line(result)


def test_which_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    xdg = write(tmp_path / "xdg" / "ha" / "config.toml", "")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    environ = {"XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    assert find_config([], environ) == xdg  # the search path: the user's file
    here = write(work / "ha.toml", "")
    assert find_config([], environ) == Path("ha.toml")  # ./ha.toml first
    assert find_config([], {**environ, "HA_CONFIG": str(xdg)}) == xdg  # HA_CONFIG next
    named = write(tmp_path / "named.toml", "")
    args = ["status", "--config", str(named), "/p", "--", "--config", str(here)]
    assert find_config(args, {**environ, "HA_CONFIG": str(xdg)}) == named  # the flag first
    assert find_config([f"--config={xdg}"], environ) == xdg
    assert find_config([], {**environ, "HA_CONFIG": ""}) is None  # set but empty: none


def test_the_command_reads_the_search_path(tmp_path: Path, env: dict[str, str]) -> None:
    work = tmp_path / "work"
    write(work / "ha.toml", f'url = "sqlite://{tmp_path}/cwd.db"\n')
    result = subprocess.run(
        [sys.executable, "-m", "ha", "status", "/p"],
        capture_output=True, text=True, env=env, cwd=work, timeout=60,
    )  # fmt: skip
    assert used_url(result) == "cwd.db"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[run]\ngrace = "soon"\n', "c.toml: [run]: grace: 'soon' is not a valid float"),
        ("[run]\nnope = 1\n", "c.toml: [run]: unknown key 'nope'"),
        ('[run]\nurl = "x"\n', "url goes at the top level"),
        ("[nosuch]\nx = 1\n", "c.toml: the top level: unknown key 'nosuch'"),
        ('log-format = "xml"\n', "c.toml: the top level: log-format: 'xml' is not one of"),
        ("[run]\nrequire-fence = 1\n", "c.toml: [run]: require-fence is true or false"),
        ("[run]\ngrace = [1, 2]\n", "c.toml: [run]: grace takes one value, not a list"),
        ("url = \n", "c.toml: not valid TOML"),
        ('[jobs.manager]\nhot = "x"\n', "c.toml: [jobs.manager]: unknown key 'hot'"),
    ],
)
def test_a_bad_file_names_the_file_and_key(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigurationError) as error:
        load_config(write(tmp_path / "c.toml", text), cli)
    assert message in str(error.value)


def test_a_good_file_becomes_the_default_map(tmp_path: Path) -> None:
    text = 'url = "zk://h/x"\n[run]\nid = "a"\nfence-timeout = 3\n[jobs.manager]\nimport = "m"\n'
    found = load_config(write(tmp_path / "c.toml", text), cli)
    assert found == {
        "url": "zk://h/x",
        "run": {"identity": "a", "fence_timeout": 3},
        "jobs": {"manager": {"imports": ["m"]}},
    }


def test_bad_files_and_missing_ones_are_one_line(tmp_path: Path, env: dict[str, str]) -> None:
    config = write(tmp_path / "c.toml", '[run]\ngrace = "soon"\n')
    line = one_error_line(ha("status", "/p", "--config", str(config), env=env))
    assert line == f"ha: error: {config}: [run]: grace: 'soon' is not a valid float."
    line = one_error_line(ha("status", "/p", "--config", str(tmp_path / "no.toml"), env=env))
    assert line == f"ha: error: --config {tmp_path / 'no.toml'}: no such file"
    with pytest.raises(ConfigurationError, match="HA_CONFIG .*gone.toml: no such file"):
        find_config([], {"HA_CONFIG": str(tmp_path / "gone.toml")})


def test_log_format_precedence(tmp_path: Path, env: dict[str, str]) -> None:
    """log-format in the file, HA_LOG_FORMAT over it, --log-format over both: seen on the
    first line `ha run --http` logs."""
    config = write(tmp_path / "c.toml", f'url = "sqlite://{tmp_path}/ha.db"\nlog-format = "json"\n')
    env["HA_CONFIG"] = str(config)

    def first_line(*args: str, **extra: str) -> str:
        log = tmp_path / "run.log"
        argv = [*args, "run", "/p", "--id", "a", "--http", "127.0.0.1:0", "--", "sleep", "60"]
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "ha", *argv],
                stdout=out, stderr=subprocess.STDOUT, env={**env, **extra},
            )  # fmt: skip
        try:
            lines = wait_until(lambda: log.read_text().count("\n") and log.read_text(), "a line")
            return str(lines).split("\n", 1)[0]
        finally:
            proc.terminate()
            proc.wait(timeout=30)

    assert first_line().startswith("{")
    assert not first_line(HA_LOG_FORMAT="text").startswith("{")
    assert first_line("--log-format", "json", HA_LOG_FORMAT="text").startswith("{")
    assert os.path.exists(tmp_path / "ha.db")
