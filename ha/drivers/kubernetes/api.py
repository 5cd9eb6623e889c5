"""HTTP to the Kubernetes API server with httpx, on asyncio and trio, its errors in ha's terms.

Only what the driver needs: GET, POST, PUT and DELETE of one object, LIST with a label
selector, and a watch of one object (``Api.watch``: newline-delimited JSON events). Every call
returns the HTTP status and the decoded body: 200, 201, 404, 409 and 410 are answers the driver
acts on; ``failure`` turns the others into ``ha.errors``: 401 and 403 into ``AccessDenied``
naming the verb and the resource RBAC refused, a missing namespace into
``ConfigurationError``, 422 into a ``DriverError`` with the server's reason, 429 and 5xx into
``ConnectionLost`` (the outcome of a write is then unknown, Flink's PossibleInconsistentState).
A request that gets no answer in time is ``ConnectionLost`` too.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing, asynccontextmanager
from typing import Any

import anyio
import httpx

from ...errors import AccessDenied, ConfigurationError, ConnectionLost, DriverError
from .config import Cluster
from .exec_auth import ExecCredentials

__all__ = ("Api", "failure")

log = logging.getLogger("ha.drivers.kubernetes")

CORE = "/api/v1"
COORDINATION = "/apis/coordination.k8s.io/v1"
_VERBS = {"GET": "get", "POST": "create", "PUT": "update", "DELETE": "delete", "PATCH": "patch"}


def failure(status: int, body: dict[str, Any], method: str, resource: str, where: str) -> Exception:
    """The ``ha.errors`` error for an answer the driver does not act on itself."""
    message = str(body.get("message") or body.get("reason") or f"HTTP {status}")
    verb = "list" if method == "GET" and where.endswith("s") else _VERBS.get(method, method)
    details = body.get("details") or {}
    if status in (401, 403):
        who = "the credentials were refused" if status == 401 else "RBAC forbids it"
        return AccessDenied(
            f"Kubernetes denied {verb} on {resource} in {where} ({status}, {who}): {message}"
        )
    if status == 404 and details.get("kind") == "namespaces":
        return ConfigurationError(
            f"the Kubernetes namespace {details.get('name')!r} does not exist"
        )
    if status == 422:
        return DriverError(f"Kubernetes refused {verb} on {resource} {where}: {message}")
    if status == 429 or status >= 500:
        return ConnectionLost(
            f"Kubernetes could not serve {verb} on {resource} ({status}): {message}"
        )
    return DriverError(f"Kubernetes answered {verb} on {resource} with {status}: {message}")


class _Body(httpx.AsyncByteStream):
    """A request body httpx sends as it is: bytes given to httpx become an async generator of
    its own, left unfinished when a send fails (trio reports such generators)."""

    def __init__(self, data: bytes) -> None:
        self._chunks = [data]

    def __aiter__(self) -> _Body:
        return self

    async def __anext__(self) -> bytes:
        if not self._chunks:
            raise StopAsyncIteration
        return self._chunks.pop()


class Api:
    """One httpx client to one API server, with the cluster's credentials."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self._client: httpx.AsyncClient | None = None
        self._headers: dict[str, str] = {}
        plugin = cluster.exec_plugin
        self.exec = None if plugin is None else ExecCredentials(plugin)

    def open(self) -> None:
        token = self.cluster.bearer()
        self._headers = {"Accept": "application/json", "Content-Type": "application/json"}
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        auth = httpx.BasicAuth(*self.cluster.basic) if self.cluster.basic else None
        self._client = httpx.AsyncClient(
            base_url=self.cluster.server,
            verify=self.cluster.ssl_context(),
            auth=auth,
            timeout=None,  # each call gives its own
            trust_env=False,  # no proxy from the environment between a session and its server
            limits=httpx.Limits(max_connections=32, max_keepalive_connections=8),
        )

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            with anyio.CancelScope(shield=True):
                await client.aclose()

    def _request(
        self,
        method: str,
        url: str,
        body: Any,
        params: dict[str, str] | None,
        within: float | None,
        content_type: str | None = None,
    ) -> httpx.Request:
        if self._client is None:
            raise ConnectionLost("the Kubernetes driver is not started (or closed)")
        content = b"" if body is None else json.dumps(body, separators=(",", ":")).encode()
        headers = {**self._headers, "Content-Length": str(len(content))}
        if content_type is not None:  # a PATCH's
            headers["Content-Type"] = content_type
        timeout = httpx.Timeout(within * 0.9 if within else None)
        request = self._client.build_request(
            method, url, params=params, headers=headers, timeout=timeout
        )
        request.stream = _Body(content)
        return request

    async def call(
        self,
        method: str,
        url: str,
        body: Any = None,
        *,
        within: float,
        params: dict[str, str] | None = None,
        content_type: str | None = None,
    ) -> tuple[int, dict[str, Any]]:
        """One request: the status and the decoded body, or ``ConnectionLost`` if no answer
        came ``within`` seconds (the outcome of a write is then unknown)."""
        token = await self._exec_token()  # not the request's time (exec_auth.py)
        try:
            with anyio.fail_after(within):
                # httpx's own timeout first: an error that ends its reads, where a cancelled
                # read would leave its generators unfinished
                request = self._request(method, url, body, params, within, content_type)
                assert self._client is not None
                response = await self._client.send(request)
                if response.status_code == 401 and token is not None and self.exec is not None:
                    self.exec.forget(token)  # revoked or rotated: the plugin's next one, once
                    await self._exec_token()
                    request = self._request(method, url, body, params, within, content_type)
                    response = await self._client.send(request)
        except TimeoutError:
            raise ConnectionLost(
                f"no answer from the Kubernetes API at {self.cluster.server} within {within:g} s"
            ) from None
        except httpx.TimeoutException as exc:
            raise ConnectionLost(f"no answer from the Kubernetes API in time ({exc!r})") from exc
        except httpx.TransportError as exc:
            raise ConnectionLost(
                f"cannot reach the Kubernetes API at {self.cluster.server}: {_reason(exc)}"
            ) from exc
        return response.status_code, _decode(response.content, response.status_code)

    async def _exec_token(self) -> str | None:
        """The exec plugin's token, set as this client's bearer (None: no plugin). A plugin
        that fails once it has given a token is a lost contact (its cloud's login service
        may be down for a while), not a configuration error."""
        if self.exec is None:
            return None
        try:
            token = await self.exec.token()
        except ConfigurationError as exc:
            if self.exec.worked:
                raise ConnectionLost(str(exc)) from None
            raise
        self._headers["Authorization"] = f"Bearer {token}"
        return token

    @asynccontextmanager
    async def watch(self, url: str, params: dict[str, str]) -> AsyncIterator[Any]:
        """A watch (``?watch=true``): yields the response and an async iterator of its events.

        To end it early, close the response from another task (the reader then gets
        ``ConnectionLost``): cancelling the reader would leave httpx's generators unfinished.
        A refused watch raises the error of its answer."""
        await self._exec_token()
        request = self._request("GET", url, None, {**params, "watch": "true"}, None)
        assert self._client is not None
        try:
            response = await self._client.send(request, stream=True)
            try:
                if response.status_code != 200:
                    body = _decode(await response.aread(), response.status_code)
                    raise failure(response.status_code, body, "GET", "watch", url)
                async with aclosing(_events(response)) as events:
                    yield response, events
            finally:
                await response.aclose()
        except httpx.TransportError as exc:
            raise ConnectionLost(f"lost the Kubernetes watch ({type(exc).__name__})") from exc


async def _events(response: httpx.Response) -> AsyncGenerator[dict[str, Any], None]:
    async with aclosing(response.aiter_lines()) as lines:  # type: ignore[type-var]
        async for line in lines:
            if line.strip():
                yield _decode(line.encode(), 200)


def _decode(raw: bytes, status: int) -> dict[str, Any]:
    if not raw:
        return {}
    try:
        body = json.loads(raw)
    except ValueError:
        if status >= 500 or status == 200:
            raise ConnectionLost(
                f"the Kubernetes API sent something not JSON: {raw[:80]!r}"
            ) from None
        return {"message": raw[:200].decode(errors="replace")}
    return body if isinstance(body, dict) else {"message": str(body)[:200]}


def _reason(exc: BaseException) -> str:
    """What an error, or the first of its causes that says anything, says."""
    seen: BaseException | None = exc
    while seen is not None and not str(seen):
        seen = seen.__cause__ or seen.__context__
    return str(seen or type(exc).__name__)
