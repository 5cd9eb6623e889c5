"""Fault hooks: the Python counterpart of client-go's fake clientset *reactors*.

Tests set them over the admin endpoint (``/_fake/...``, never itself subject to faults):

- ``POST /_fake/fail`` ``{"count": 1, "code": 500, "verb": null, "path": null, "apply": false,
  "retry_after": 1}``: the next ``count`` matching requests get a Status with that code (500
  InternalError, 429 TooManyRequests with Retry-After, 504 Timeout, 409 Conflict, 403
  Forbidden, 503, 404...).
  ``verb`` matches the HTTP method or the Kubernetes verb (get, list, watch, create, update,
  patch, delete), case-insensitively; ``path`` is a substring of the URL path. With
  ``apply: true`` the request is carried out first and its answer replaced by the error:
  a write that landed but whose client cannot know it (Flink's PossibleInconsistentState).
  A watch failed with 410 gets what a real one gets: a 200 stream of one ERROR event
  carrying 410 Expired.
- ``POST /_fake/delay`` ``{"seconds": 0.5, "count": null, "verb": null, "path": null}``: matching
  requests are answered that much later (after being carried out); ``count`` null = until reset.
- ``POST /_fake/close-watches`` ``{"abrupt": false}``: end every open watch, with the final
  chunk or (abrupt) by dropping the connection.
- ``POST /_fake/compact`` ``{"resourceVersion": null}``: forget every resource's history up to
  there (default all), as a watch cache that re-lists does; a watch from an older
  resourceVersion then gets 410 Expired.
- ``POST /_fake/reset``: drop every fail and delay rule.
- ``GET /_fake/stats``: resourceVersion, compacted, open watches, objects, requests per verb.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass
from typing import Any

from tests.support.kubeapi.status import ApiError, conflict

__all__ = ("Faults", "Rule")

MESSAGES = {
    429: (
        "TooManyRequests",
        "the server has received too many requests and has asked us to try again later",
    ),
    500: ("InternalError", "Internal error occurred: injected fault"),
    503: ("ServiceUnavailable", "the server is currently unable to handle the request"),
    504: (
        "Timeout",
        "the server was unable to return a response in the time allotted, but may still be processing the request",
    ),
    404: ("NotFound", "the server could not find the requested resource"),
}


@dataclass
class Rule:
    action: str  # "fail" or "delay"
    remaining: int | None  # None: until reset
    verb: str | None = None
    path: str | None = None
    code: int = 500
    apply: bool = False
    retry_after: int = 1
    seconds: float = 0.0

    def matches(self, method: str, verb: str, path: str) -> bool:
        if self.verb and self.verb.lower() not in (method.lower(), verb.lower()):
            return False
        return not self.path or self.path in path


class Faults:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.rules: list[Rule] = []
        self.watch_epoch = 0  # bumped by close-watches; a watch ends when it changes
        self.abrupt = False
        self.open_watches = 0
        self.requests: Counter[str] = Counter()

    def add(self, body: dict[str, Any], action: str) -> Rule:
        count = body.get("count", 1 if action == "fail" else None)
        rule = Rule(
            action=action,
            remaining=None if count is None else int(count),
            verb=body.get("verb"),
            path=body.get("path"),
            code=int(body.get("code", 500)),
            apply=bool(body.get("apply", False)),
            retry_after=int(body.get("retry_after", 1)),
            seconds=float(body.get("seconds", 0.0)),
        )
        with self.lock:
            self.rules.append(rule)
        return rule

    def reset(self) -> None:
        with self.lock:
            self.rules.clear()

    def take(self, method: str, verb: str, path: str) -> tuple[float, Rule | None]:
        """Count the request; the delay it gets and the fail rule it meets (using them up)."""
        delay, failure = 0.0, None
        with self.lock:
            self.requests[verb] += 1
            for rule in list(self.rules):
                if not rule.matches(method, verb, path):
                    continue
                if rule.action == "fail" and failure is not None:
                    continue
                if rule.action == "fail":
                    failure = rule
                else:
                    delay += rule.seconds
                if rule.remaining is not None:
                    rule.remaining -= 1
                    if rule.remaining <= 0:
                        self.rules.remove(rule)
        return delay, failure

    def error(self, rule: Rule, group: str, plural: str, name: str) -> ApiError:
        if rule.code == 409:
            return conflict(
                group,
                plural,
                name,
                "the object has been modified; please apply your changes to the latest version and try again",
            )
        if rule.code == 403:  # what RBAC answers (the fake models no RBAC of its own)
            qualified = f"{plural}.{group}" if group else plural
            return ApiError(
                403,
                "Forbidden",
                f'{qualified} "{name}" is forbidden: User "system:anonymous" cannot use it (injected)',
                {"name": name, **({"group": group} if group else {}), "kind": plural},
            )
        reason, message = MESSAGES.get(rule.code, ("InternalError", "injected fault"))
        details: dict[str, Any] = {}
        headers = {}
        if rule.code == 429:
            details["retryAfterSeconds"] = rule.retry_after
            headers["Retry-After"] = str(rule.retry_after)
        return ApiError(rule.code, reason, message, details, headers)
