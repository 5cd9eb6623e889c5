"""One parser for every driver's URL and options: ``SCHEME://WHERE[?NAME=VALUE&...]``.

Each driver declares its options once, in an ``OptionTable`` (name -> kind: seconds, flag or
text). The table reads a URL's query text and a keyword's value alike, so
``memory://a?session_timeout=2`` and ``connect("memory://a", session_timeout=2)`` mean the same,
and keywords win over the URL. What ``WHERE`` means (a cluster's name, a file's path, a list of
servers) is each driver's own business; the table hands it over split and unquoted.

Every error is a ``ConfigurationError`` of one line that names the option, the value given and,
for a URL, the URL (with any password hidden).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from ..errors import ConfigurationError

__all__ = ("Kind", "OptionTable", "ParsedURL", "seconds")

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


class Kind(enum.Enum):
    SECONDS = "seconds"  # a positive, finite number (text from a URL is read as a float)
    FLAG = "flag"  # a bool, or one of 1/0, true/false, yes/no, on/off
    TEXT = "text"  # a string, checked by the driver


def seconds(name: str, value: object) -> float:
    """``value`` as a positive, finite number of seconds; a number, not text or a bool."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigurationError(f"{name} must be a number of seconds, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise ConfigurationError(f"{name} must be a positive number of seconds, got {value!r}")
    return float(value)


@dataclass(frozen=True, slots=True)
class ParsedURL:
    """A driver URL taken apart: ``netloc`` as written, ``path`` unquoted, options converted."""

    netloc: str
    path: str
    options: dict[str, Any]


class OptionTable:
    """The options one backend takes, by name and kind."""

    def __init__(
        self,
        backend: str,
        *,
        seconds: tuple[str, ...] = (),
        flags: tuple[str, ...] = (),
        text: tuple[str, ...] = (),
    ) -> None:
        self.backend = backend  # as messages name it: "sqlite", "ZooKeeper"
        self.kinds: dict[str, Kind] = {
            **dict.fromkeys(seconds, Kind.SECONDS),
            **dict.fromkeys(flags, Kind.FLAG),
            **dict.fromkeys(text, Kind.TEXT),
        }

    def _known(self) -> str:
        return ", ".join(sorted(self.kinds))

    def convert(self, name: str, value: Any) -> Any:
        """One option's value, from a keyword or a URL's text; None stays None (the default)."""
        kind = self.kinds.get(name)
        if kind is None:
            raise ConfigurationError(
                f"unknown {self.backend} option {name!r}; known: {self._known()}"
            )
        if value is None:
            return None
        if kind is Kind.SECONDS:
            if isinstance(value, str):
                try:
                    value = float(value)
                except ValueError:
                    raise ConfigurationError(
                        f"{name} must be a number of seconds, got {value!r}"
                    ) from None
            return seconds(name, value)
        if kind is Kind.FLAG:
            if isinstance(value, bool):
                return value
            text = str(value).lower()
            if text in _TRUE | _FALSE:
                return text in _TRUE
            raise ConfigurationError(f"{name} must be true or false, got {value!r}")
        if not isinstance(value, str):
            raise ConfigurationError(f"{name} must be a string, got {value!r}")
        return value

    def keywords(self, options: Mapping[str, Any]) -> dict[str, Any]:
        """Keyword options, converted; an unknown name is an error."""
        return {name: self.convert(name, value) for name, value in options.items()}

    def parse(self, url: str, *, scheme: str, usage: str) -> ParsedURL:
        """Split ``url`` (``usage`` shows its form in errors) and convert its query's options.

        A URL has no ``#fragment``; an option given twice takes its last value.
        """
        if not isinstance(url, str):
            raise ConfigurationError(f"expected {usage}, got {url!r}")
        try:
            parts = urlsplit(url)
        except ValueError as exc:
            raise ConfigurationError(
                f"malformed {self.backend} URL {_shown(url)!r}: {exc}"
            ) from None
        if parts.scheme != scheme:
            raise ConfigurationError(f"expected {usage}, got {_shown(url)!r}")
        if parts.fragment:
            raise ConfigurationError(f"{_shown(url)!r}: a {self.backend} URL has no #fragment")
        try:
            pairs = parse_qsl(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
        except ValueError:
            raise ConfigurationError(f"malformed query string in {_shown(url)!r}") from None
        options: dict[str, Any] = {}
        for name, text in pairs:
            if name not in self.kinds:
                raise ConfigurationError(
                    f"{_shown(url)!r}: unknown option {name!r}; known: {self._known()}"
                )
            try:
                options[name] = self.convert(name, text)
            except ConfigurationError as exc:
                raise ConfigurationError(f"{_shown(url)!r}: {exc}") from None
        return ParsedURL(parts.netloc, unquote(parts.path), options)


def _shown(url: str) -> str:
    """``url`` with the password of its user info hidden, for messages."""
    head, sep, rest = url.partition("://")
    netloc = rest[: next((i for i, c in enumerate(rest) if c in "/?#"), len(rest))]
    userinfo, at, _ = netloc.rpartition("@")
    if not sep or not at or ":" not in userinfo:
        return url
    user = userinfo.split(":", 1)[0]
    return f"{head}://{user}:***@{rest[len(userinfo) + 1 :]}"
