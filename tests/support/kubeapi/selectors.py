"""Label and field selectors, parsed as the API server parses them.

Label selectors: comma-separated requirements, all of which must hold: ``k=v``, ``k==v``,
``k!=v``, ``k in (a,b)``, ``k notin (a,b)``, ``k`` (exists) and ``!k`` (does not exist).
Field selectors: ``field=value``, ``field==value``, ``field!=value`` on the fields a kind
supports (``metadata.name`` and ``metadata.namespace`` everywhere); any other field is a
400 "field label not supported", as on the real server.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from tests.support.kubeapi.resources import Resource
from tests.support.kubeapi.status import bad_request

__all__ = ("Matcher", "field_matcher", "label_matcher", "matcher")

Matcher = Callable[[dict[str, Any]], bool]

_SET = re.compile(r"^\s*(!?)([A-Za-z0-9./_-]+)\s*(?:(notin|in)\s*\(([^)]*)\))?\s*$")
_EQUALITY = re.compile(r"^\s*([A-Za-z0-9./_-]+)\s*(==|=|!=)\s*([A-Za-z0-9._-]*)\s*$")


def _split(selector: str) -> list[str]:
    """Split on commas outside parentheses."""
    parts, depth, current = [], 0, ""
    for char in selector:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return [part for part in parts if part.strip()]


def _label_test(key: str, op: str, values: frozenset[str]) -> Callable[[dict[str, str]], bool]:
    def test(labels: dict[str, str]) -> bool:
        if op == "exists":
            return key in labels
        if op == "!exists":
            return key not in labels
        if op == "in":
            return labels.get(key) in values
        return labels.get(key) not in values  # notin, !=

    return test


def label_matcher(selector: str) -> Matcher:
    tests: list[Callable[[dict[str, str]], bool]] = []
    for part in _split(selector):
        equality = _EQUALITY.match(part)
        if equality:
            key, op, value = equality.groups()
            tests.append(_label_test(key, "notin" if op == "!=" else "in", frozenset([value])))
            continue
        found = _SET.match(part)
        if not found or (found.group(1) and found.group(3)):
            raise bad_request(f"unable to parse requirement: {part.strip()!r}")
        negated, key, op, values = found.groups()
        if op is None:
            tests.append(_label_test(key, "!exists" if negated else "exists", frozenset()))
            continue
        options = frozenset(value.strip() for value in values.split(",") if value.strip())
        if not options:
            raise bad_request(f"unable to parse requirement: {part.strip()!r}: empty set")
        tests.append(_label_test(key, op, options))

    def matches(obj: dict[str, Any]) -> bool:
        labels = obj.get("metadata", {}).get("labels") or {}
        return all(test(labels) for test in tests)

    return matches


def _field(obj: dict[str, Any], path: str) -> str:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return "" if value is None else str(value)


def _field_test(field: str, value: str, negated: bool) -> Matcher:
    return lambda obj: (_field(obj, field) == value) != negated


def field_matcher(resource: Resource, selector: str) -> Matcher:
    supported = ("metadata.name", "metadata.namespace", *resource.fields)
    tests: list[Callable[[dict[str, Any]], bool]] = []
    for part in _split(selector):
        found = re.match(r"^\s*([A-Za-z0-9.]+)\s*(==|=|!=)(.*)$", part)
        if not found:
            raise bad_request(f"invalid selector: '{selector}'; can't understand '{part}'")
        field, op, value = found.group(1), found.group(2), found.group(3).strip()
        if field not in supported:
            raise bad_request(
                f"field label not supported: {field}"
                if resource.kind != "Namespace"
                else f'"{field}" is not a known field selector: only "metadata.name", "metadata.namespace"'
            )
        tests.append(_field_test(field, value, op == "!="))
    return lambda obj: all(test(obj) for test in tests)


def matcher(resource: Resource, labels: str | None, fields: str | None) -> Matcher:
    """One test for both selectors (absent ones match everything)."""
    tests = []
    if labels:
        tests.append(label_matcher(labels))
    if fields:
        tests.append(field_matcher(resource, fields))
    return lambda obj: all(test(obj) for test in tests)
