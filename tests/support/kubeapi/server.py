"""The HTTP side of the fake API server: URL routing, bodies, fault hooks, watch streams.

URLs are the real ones: ``/api/v1/namespaces/{ns}/configmaps[/{name}]``,
``/apis/coordination.k8s.io/v1/namespaces/{ns}/leases[/{name}]``, cluster-wide lists
(``/api/v1/configmaps``, ``/apis/coordination.k8s.io/v1/leases``), ``/api/v1/namespaces[/{name}]``,
the legacy ``/watch/`` prefix, the discovery documents, ``/healthz``, ``/readyz``, ``/livez``,
and the admin endpoint ``/_fake/...`` (see faults.py). HTTP/1.1 with keep-alive, one thread per
connection (stdlib ``ThreadingHTTPServer``), so a watch holds a thread, as it holds a goroutine.
"""

from __future__ import annotations

import json
import socket
import ssl
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from tests.support.kubeapi.auth import Auth
from tests.support.kubeapi.discovery import document
from tests.support.kubeapi.faults import Faults
from tests.support.kubeapi.resources import Resource, find
from tests.support.kubeapi.rest import Rest
from tests.support.kubeapi.selectors import matcher
from tests.support.kubeapi.status import ApiError, bad_request, expired, status
from tests.support.kubeapi.store import Store
from tests.support.kubeapi.table import table, wants_table
from tests.support.kubeapi.watch import (
    Abort,
    WatchSettings,
    parse_version,
    serve_watch,
    wait_fresh,
)

__all__ = ("FakeApiServer", "Target", "route")


@dataclass(frozen=True)
class Target:
    resource: Resource
    namespace: str | None  # None: every namespace (or a cluster-scoped kind)
    name: str | None  # None: the collection
    watch: bool  # reached through the legacy /watch/ prefix


def route(path: str) -> Target | None:
    parts = [part for part in path.split("/") if part]
    if len(parts) >= 2 and parts[:2] == ["api", "v1"]:
        group, version, rest = "", "v1", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    watch = bool(rest) and rest[0] == "watch"
    if watch:
        rest = rest[1:]
    namespace: str | None = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        if len(rest) > 4:
            return None  # no subresources
        namespace, rest = rest[1], rest[2:]
    if len(rest) not in (1, 2):
        return None
    resource = find(group, version, rest[0])
    if resource is None or (namespace is not None and not resource.namespaced):
        return None
    name = rest[1] if len(rest) == 2 else None
    if name is not None and resource.namespaced and namespace is None:
        return None
    return Target(resource, namespace, name, watch)


class FakeApiServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self,
        address: tuple[str, int],
        store: Store,
        settings: WatchSettings,
        *,
        tls: ssl.SSLContext | None = None,
        auth: Auth | None = None,
        verbose: bool = False,
    ) -> None:
        super().__init__(address, Handler)
        self.tls = tls
        self.auth = auth or Auth()
        self.store = store
        self.rest = Rest(store)
        self.faults = Faults()
        self.settings = settings
        self.verbose = verbose
        with store.cond:
            self.rest.ensure_namespace("default")

    def handle_error(self, request: Any, client_address: Any) -> None:
        error = sys.exc_info()[1]
        if isinstance(error, OSError):  # a failed TLS handshake, a client gone: not our bug
            if self.verbose:
                print(f"connection from {client_address}: {error}", file=sys.stderr)
            return
        super().handle_error(request, client_address)

    @property
    def address(self) -> str:
        host, port = self.server_address[:2]
        return f"{host!s}:{port}"

    def admin(self, method: str, action: str, body: Any) -> dict[str, Any]:
        faults, store = self.faults, self.store
        body = body if isinstance(body, dict) else {}
        if method == "GET" and action == "stats":
            with store.cond:
                return {
                    "resourceVersion": store.rv,
                    "compacted": store.compacted,
                    "objects": len(store.objects),
                    "watches": faults.open_watches,
                    "requests": dict(faults.requests),
                }
        if method != "POST":
            raise ApiError(405, "MethodNotAllowed", f"{method} /_fake/{action} is not allowed")
        if action in ("fail", "delay"):
            rule = faults.add(body, action)
            return {"added": action, "count": rule.remaining}
        if action == "reset":
            faults.reset()
            return {"reset": True}
        if action == "close-watches":
            with store.cond:
                faults.abrupt = bool(body.get("abrupt", False))
                faults.watch_epoch += 1
                store.cond.notify_all()
            return {"closed": faults.open_watches}
        if action == "compact":
            with store.cond:
                return {"compacted": store.compact(body.get("resourceVersion"))}
        raise ApiError(404, "NotFound", f"no admin action {action!r}")


def _verb(method: str, target: Target, watching: bool) -> str:
    if watching:
        return "watch"
    if method == "GET":
        return "get" if target.name else "list"
    return {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(
        method, method.lower()
    )


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: FakeApiServer

    def setup(self) -> None:
        if self.server.tls is not None:  # the handshake in this connection's own thread
            self.request = self.server.tls.wrap_socket(self.request, server_side=True)
        super().setup()
        # one event or answer per write must not wait for the client's delayed ACK (Nagle)
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def do_GET(self) -> None:
        self.serve("GET")

    def do_POST(self) -> None:
        self.serve("POST")

    def do_PUT(self) -> None:
        self.serve("PUT")

    def do_PATCH(self) -> None:
        self.serve("PATCH")

    def do_DELETE(self) -> None:
        self.serve("DELETE")

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.verbose:
            super().log_message(format, *args)

    # bodies

    def read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            data = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    return data
                data += self.rfile.read(size)
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def send_json(self, code: int, doc: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(doc).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for header, value in (headers or {}).items():
            self.send_header(header, value)
        self.end_headers()
        self.wfile.write(data)

    def send_chunk(self, doc: dict[str, Any]) -> None:
        line = json.dumps(doc).encode() + b"\n"
        self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
        self.wfile.flush()

    # dispatch

    def serve(self, method: str) -> None:
        url = urlsplit(self.path)
        query = dict(parse_qsl(url.query, keep_blank_values=True))
        path = url.path.rstrip("/") or "/"
        raw = self.read_body()
        try:
            body = json.loads(raw) if raw.strip() else None
        except ValueError as error:
            self.send_json(400, bad_request(f"json parse error: {error}").status())
            return
        try:
            if path.startswith("/_fake/"):
                self.send_json(200, self.server.admin(method, path[len("/_fake/") :], body))
                return
            if path in ("/healthz", "/readyz", "/livez"):
                data = b"ok"
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return
            peer = self.connection.getpeercert() if self.server.tls is not None else None
            self.server.auth.check(self.headers.get("Authorization"), peer or None)
            if method == "GET":
                found = document(path, self.server.address)
                if found is not None:
                    self.send_json(200, found)
                    return
            target = route(path)
            if target is None:
                self.send_json(
                    404, status(404, "NotFound", "the server could not find the requested resource")
                )
                return
            self.serve_resource(method, target, query, body)
        except ApiError as error:
            self.send_json(error.code, error.status(), error.headers)
        except (ValueError, TypeError) as error:  # a malformed parameter or admin body
            self.send_json(400, bad_request(f"invalid request: {error}").status())
        except Exception as error:  # a bug in the fake: say so, keep serving
            traceback.print_exc()
            message = f"Internal error occurred: {type(error).__name__}: {error}"
            self.send_json(500, status(500, "InternalError", message))

    def serve_resource(self, method: str, target: Target, query: dict[str, str], body: Any) -> None:
        watching = method == "GET" and (target.watch or query.get("watch") in ("true", "1"))
        verb = _verb(method, target, watching)
        delay, failure = self.server.faults.take(method, verb, urlsplit(self.path).path)
        resource = target.resource
        if watching and failure is not None and failure.code == 410:
            # a watch learns of 410 as a real one does: an ERROR event in a 200 stream
            with self.server.store.cond:
                oldest = self.server.store.rv
            requested = parse_version(query.get("resourceVersion")) or oldest
            time.sleep(delay)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.send_chunk({"type": "ERROR", "object": expired(requested, oldest)})
            self.wfile.write(b"0\r\n\r\n")
            return
        if failure is not None and not failure.apply:
            time.sleep(delay)
            raise self.server.faults.error(
                failure, resource.group, resource.plural, target.name or ""
            )
        if watching:
            if target.name is not None:  # legacy /watch/.../name: a watch on one object
                query = {**query, "fieldSelector": f"metadata.name={target.name}"}
            # 400 for a bad version or selector before the stream starts
            parse_version(query.get("resourceVersion"))
            float(query.get("timeoutSeconds") or 0)
            matcher(resource, query.get("labelSelector"), query.get("fieldSelector"))
            time.sleep(delay)
            self.serve_watch(target, query)
            return
        code, answer = 200, None
        rest, store = self.server.rest, self.server.store
        if method == "GET":  # a read from a version the store has not reached waits for it
            version = parse_version(query.get("resourceVersion"))
            if version is not None:
                wait_fresh(store, version, self.server.settings.fresh_wait)
        with store.cond:
            if method == "GET" and target.name is None:
                answer = rest.list(resource, target.namespace, query)
            elif method == "GET":
                answer = rest.get(resource, target.namespace, target.name or "")
            elif method == "POST" and target.name is None:
                answer, code = rest.create(resource, target.namespace, body), 201
            elif method == "PUT" and target.name is not None:
                answer, created = rest.update(resource, target.namespace, target.name, body)
                code = 201 if created else 200
            elif method == "PATCH" and target.name is not None:
                media_type = self.headers.get("Content-Type", "").split(";")[0].strip()
                answer = rest.patch(resource, target.namespace, target.name, media_type, body)
            elif method == "DELETE" and target.name is not None:
                answer = rest.delete(resource, target.namespace, target.name, body)
            elif method == "DELETE":
                answer = rest.delete_collection(resource, target.namespace, query, body)
            else:
                raise ApiError(
                    405,
                    "MethodNotAllowed",
                    "the server does not allow this method on the requested resource",
                )
        if method == "GET" and wants_table(self.headers.get("Accept", "")):
            objects = answer["items"] if target.name is None else [answer]
            version = answer["metadata"].get("resourceVersion", "")
            answer = table(resource, objects, version)
        time.sleep(delay)
        if failure is not None:  # carried out, but the client is told it failed
            raise self.server.faults.error(
                failure, resource.group, resource.plural, target.name or ""
            )
        self.send_json(code, answer)

    def serve_watch(self, target: Target, query: dict[str, str]) -> None:
        server = self.server
        with server.store.cond:
            epoch = server.faults.watch_epoch
            server.faults.open_watches += 1

        def closed() -> str | None:
            if server.faults.watch_epoch == epoch:
                return None
            return "abrupt" if server.faults.abrupt else "graceful"

        def send_table(event: dict[str, Any]) -> None:
            obj = event["object"]
            if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                version = obj["metadata"]["resourceVersion"]
                event = {**event, "object": table(target.resource, [obj], version)}
            self.send_chunk(event)

        # kubectl get -w asks for one-row tables
        tables = wants_table(self.headers.get("Accept", ""))
        send: Callable[[dict[str, Any]], None] = send_table if tables else self.send_chunk
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            serve_watch(
                server.store,
                target.resource,
                target.namespace,
                query,
                send,
                closed,
                server.settings,
            )
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (Abort, OSError):
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        finally:
            with server.store.cond:
                server.faults.open_watches -= 1
