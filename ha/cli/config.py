"""The config file: TOML holding what the flags hold, for every command.

Which file: ``--config FILE`` (anywhere on the command line, before ``--``), else
``HA_CONFIG`` (set but empty: no file at all), else the first that exists of ``./ha.toml``,
``$XDG_CONFIG_HOME/ha/config.toml`` (``~/.config/ha/config.toml``) and
``/etc/ha/config.toml``. A file named by ``--config`` or ``HA_CONFIG`` must exist.

What it holds: ``ha``'s own options at the top, each command's options in a table named after
it (``[run]``, ``[status]``, ``[jobs.manager]``), under their flag's name without the dashes
(``fence-timeout`` or ``fence_timeout``)::

    url = "zk://zk1:2181,zk2:2181/ha"
    log-format = "json"

    [run]
    id = "host-a"
    grace = 5.0
    http = "127.0.0.1:8008"

A flag given on the command line wins, then the option's environment variable (``HA_URL``,
``HA_LOG_FORMAT``, ``HA_LOG_LEVEL``), then the file, then the built-in default: the file
becomes click's ``default_map``, read when no flag and no variable gave a value. The file is
checked as a whole before the command runs: an unknown table or key, or a value of the wrong
type, is one error line naming the file and the key.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import click

from ..errors import ConfigurationError

__all__ = ("ConfiguredGroup", "find_config", "load_config", "search_path")


def search_path(environ: Mapping[str, str]) -> list[Path]:
    """Where a config file is looked for when none is named, first found wins."""
    config_home = environ.get("XDG_CONFIG_HOME") or os.path.join(
        environ.get("HOME") or os.path.expanduser("~"), ".config"
    )
    return [Path("ha.toml"), Path(config_home) / "ha" / "config.toml", Path("/etc/ha/config.toml")]


def _flag(args: Sequence[str]) -> str | None:
    """The last ``--config`` value before ``--`` (a later flag wins, as for every option)."""
    found = None
    for i, arg in enumerate(args):
        if arg == "--":
            break
        if arg == "--config" and i + 1 < len(args):
            found = args[i + 1]
        elif arg.startswith("--config="):
            found = arg.partition("=")[2]
    return found


def find_config(args: Sequence[str], environ: Mapping[str, str]) -> Path | None:
    """The config file for a command line, or None."""
    named = _flag(args)
    source = "--config"
    if named is None and "HA_CONFIG" in environ:
        named, source = environ["HA_CONFIG"], "HA_CONFIG"
        if not named:
            return None
    if named is not None:
        path = Path(named).expanduser()
        if not path.is_file():
            raise ConfigurationError(f"{source} {named}: no such file")
        return path
    return next((p for p in search_path(environ) if p.is_file()), None)


def load_config(path: Path, group: click.Group) -> dict[str, Any]:
    """The file as click's ``default_map`` for ``group``, checked against its options."""
    try:
        with open(path, "rb") as f:
            document = tomllib.load(f)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigurationError(f"{path}: not valid TOML: {exc}") from None
    except OSError as exc:
        raise ConfigurationError(f"{path}: {exc.strerror or exc}") from None
    return _section(path, group, document, [])


def _key(name: str) -> str:
    return name.replace("_", "-")


def _options(command: click.Command) -> dict[str, click.Option]:
    """A command's options by key: each long flag without dashes, and the parameter's name."""
    found: dict[str, click.Option] = {}
    for param in command.params:
        if not isinstance(param, click.Option) or not param.expose_value or param.hidden:
            continue
        if param.name in ("help", "version"):
            continue
        for opt in param.opts:
            if opt.startswith("--"):
                found[_key(opt[2:])] = param
        if param.name is not None:
            found.setdefault(_key(param.name), param)
    return found


def _section(
    path: Path, command: click.Command, table: dict[str, Any], where: list[str]
) -> dict[str, Any]:
    name = "[" + ".".join(where) + "]" if where else "the top level"
    options = _options(command)
    commands = command.commands if isinstance(command, click.Group) else {}
    result: dict[str, Any] = {}
    for key, value in table.items():
        if key in commands and isinstance(value, dict):
            result[key] = _section(path, commands[key], value, [*where, key])
            continue
        option = options.get(_key(key))
        if option is None:
            flags = {k for k, o in options.items() if f"--{k}" in o.opts}
            known = sorted({*flags, *commands})
            hint = ""
            if where and _key(key) in ("url", "debug", "config", "log-format", "log-level"):
                hint = f" ({key} goes at the top level, not in a table)"
            raise ConfigurationError(
                f"{path}: {name}: unknown key {key!r}{hint}; known: {', '.join(known)}"
            )
        result[option.name or key] = _check(path, name, key, option, value)
    return result


def _check(path: Path, where: str, key: str, option: click.Option, value: Any) -> Any:
    """The value as the option would take it from the command line, or a clear error."""
    if isinstance(value, dict):
        raise ConfigurationError(f"{path}: {where}: {key} is a table, not a value")
    if option.multiple and not isinstance(value, list):
        value = [value]
    if isinstance(value, list) and not option.multiple:
        raise ConfigurationError(f"{path}: {where}: {key} takes one value, not a list")
    if option.is_flag and not isinstance(value, bool):
        raise ConfigurationError(f"{path}: {where}: {key} is true or false, not {value!r}")
    try:
        with click.Context(click.Command("ha")) as ctx:
            option.type_cast_value(ctx, value)
    except click.BadParameter as exc:
        raise ConfigurationError(f"{path}: {where}: {key}: {exc.message}") from None
    return value


class ConfiguredGroup(click.Group):
    """The ``ha`` group: finds and loads the config file before parsing the command line."""

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        if parent is None and "default_map" not in extra:
            from ._run import Failure

            try:
                path = find_config(args, os.environ)
                if path is not None:
                    extra["default_map"] = load_config(path, self)
            except ConfigurationError as exc:
                raise Failure(str(exc)) from None
        return super().make_context(info_name, args, parent, **extra)
