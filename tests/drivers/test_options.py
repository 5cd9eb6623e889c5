"""The one URL/option parser of the drivers (``ha.drivers._options``), and each driver's use of it."""

from __future__ import annotations

import pytest

import ha.drivers
from ha.drivers._options import OptionTable, seconds
from ha.drivers.memory import MemoryDriver
from ha.drivers.sqlite import SqliteDriver
from ha.drivers.zookeeper import ZooKeeperDriver
from ha.errors import ConfigurationError

TABLE = OptionTable("test", seconds=("timeout",), flags=("tls",), text=("mode",))


def parse(url: str) -> dict[str, object]:
    return TABLE.parse(url, scheme="t", usage="t://WHERE").options


def test_url_text_and_keywords_convert_alike() -> None:
    assert parse("t://x?timeout=2.5&tls=yes&mode=fast") == {
        "timeout": 2.5,
        "tls": True,
        "mode": "fast",
    }
    assert TABLE.keywords({"timeout": 2, "tls": "off", "mode": "fast"}) == {
        "timeout": 2.0,
        "tls": False,
        "mode": "fast",
    }
    assert TABLE.convert("timeout", None) is None  # the driver's default
    assert parse("t://x?timeout=1&timeout=3") == {"timeout": 3.0}  # the last one counts


def test_the_parts_come_unquoted() -> None:
    parsed = TABLE.parse("t://host:1/a%20b/c?mode=x", scheme="t", usage="t://WHERE")
    assert (parsed.netloc, parsed.path) == ("host:1", "/a b/c")


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("u://x", "expected t://WHERE, got 'u://x'"),
        ("t://x#frag", "'t://x#frag': a test URL has no #fragment"),
        ("t://x?timeout", "malformed query string in 't://x?timeout'"),
        (
            "t://x?colour=red",
            "'t://x?colour=red': unknown option 'colour'; known: mode, timeout, tls",
        ),
        (
            "t://x?timeout=soon",
            "'t://x?timeout=soon': timeout must be a number of seconds, got 'soon'",
        ),
        (
            "t://x?timeout=-1",
            "'t://x?timeout=-1': timeout must be a positive number of seconds, got -1.0",
        ),
        ("t://x?timeout=inf", "timeout must be a positive number of seconds, got inf"),
        ("t://x?tls=maybe", "tls must be true or false, got 'maybe'"),
        ("t://u:secret@x?tls=maybe", "'t://u:***@x?tls=maybe': tls must be true or false"),
    ],
)
def test_every_error_is_one_line_naming_the_option_and_value(url: str, message: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        parse(url)
    assert message in str(caught.value) and "\n" not in str(caught.value)
    assert "secret" not in str(caught.value)


def test_keyword_errors_name_the_backend_and_the_known_options() -> None:
    with pytest.raises(ConfigurationError, match="unknown test option 'colour'; known: mode"):
        TABLE.keywords({"colour": "red"})
    with pytest.raises(ConfigurationError, match="mode must be a string, got 3"):
        TABLE.keywords({"mode": 3})


@pytest.mark.parametrize("bad", ["2", True, float("nan"), 0, -1, None])
def test_constructors_take_seconds_as_numbers_only(bad: object) -> None:
    with pytest.raises(ConfigurationError, match="^timeout must be"):
        seconds("timeout", bad)


def test_each_driver_parses_its_url_through_the_table() -> None:
    memory = MemoryDriver.from_url("memory://cluster-a?session_timeout=3", session_timeout="4")
    assert memory.session_timeout == 4.0  # keywords win, converted as URL text is
    sqlite = SqliteDriver.from_url("sqlite:///x/ha.db?poll_interval=0.5", session_timeout=5)
    assert (sqlite.path, sqlite.session_timeout) == ("/x/ha.db", 5.0)
    zk = ZooKeeperDriver.from_url("zk://u:p@h:2181/app?use_ssl=on&op_timeout=2")
    assert (zk.options.auth, zk.options.use_ssl, zk.options.op_timeout) == ("u:p", True, 2.0)
    for url in ("memory://a?colour=1", "sqlite:///x/ha.db?colour=1", "zk://h/a?colour=1"):
        with pytest.raises(ConfigurationError, match="unknown option 'colour'"):
            ha.drivers.connect(url)
    with pytest.raises(ConfigurationError, match="expected memory://NAME"):
        MemoryDriver.from_url("memory://")
