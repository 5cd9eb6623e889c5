"""The fake API server as a child process that tests start, kill, pause and restart.

``FakeKubeApi(directory)`` keeps its state file, port file and log in ``directory``.
``start()`` runs ``python -m tests.support.kubeapi`` and returns once ``/healthz`` answers;
the first start picks a free port, every later one reuses it, so clients keep their URL across
``restart()`` (SIGKILL, then start again on the same state: objects and resourceVersions stay,
the watch history does not, as after a control-plane restart). ``pause()``/``resume()`` are
SIGSTOP/SIGCONT: the port stays open and requests hang, as with a stalled apiserver.

The fault helpers call the admin endpoint (``/_fake/...``, see faults.py) and ``request()`` is
a small synchronous client for test setup; the code under test talks HTTP on ``url``. All of
them block (urllib), briefly, on loopback.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from ha._process import deathsig_preexec

__all__ = ("FakeKubeApi",)

ROOT = Path(__file__).resolve().parents[3]


class FakeKubeApi:
    def __init__(
        self,
        directory: Path | None = None,
        *,
        history: int = 100,
        history_max: int = 1000,
        event_fresh: float = 75.0,
        min_request_timeout: float = 1800.0,
        bookmark_interval: float = 60.0,
        fresh_wait: float = 3.0,
        tls: bool = False,
        tokens: tuple[str, ...] = (),
        basic: tuple[str, ...] = (),
        client_certificates: bool = False,
        verbose: bool = False,
    ) -> None:
        self.directory = Path(directory or tempfile.mkdtemp(prefix="ha-kubeapi-"))
        self.directory.mkdir(parents=True, exist_ok=True)
        self.state_file = self.directory / "state.json"
        self.port_file = self.directory / "port"
        self.log = self.directory / "kubeapi.log"
        self.options = [
            *("--history", str(history)),
            *("--history-max", str(history_max)),
            *("--event-fresh", str(event_fresh)),
            *("--min-request-timeout", str(min_request_timeout)),
            *("--bookmark-interval", str(bookmark_interval)),
            *("--fresh-wait", str(fresh_wait)),
            *(["--verbose"] if verbose else []),
        ]
        # HTTPS (and client certificates) with a CA made by openssl in directory/certs
        self.certs: Path | None = None
        if tls or client_certificates:
            from tests.support.backends.etcd import make_certs

            self.certs = make_certs(self.directory / "certs")
            self.options += ["--tls-cert", str(self.certs / "server.pem")]
            self.options += ["--tls-key", str(self.certs / "server.key")]
            if client_certificates:
                self.options += ["--client-ca", str(self.certs / "ca.pem")]
        for token in tokens:
            self.options += ["--token", token]
        for pair in basic:
            self.options += ["--basic", pair]
        self.port: int | None = None
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        if self.port is None:
            raise RuntimeError("the fake API server has not been started")
        return f"{'https' if self.certs else 'http'}://127.0.0.1:{self.port}"

    @property
    def ca_file(self) -> Path | None:
        """The CA that signed the server's (and the client's) certificate, with TLS."""
        return self.certs / "ca.pem" if self.certs else None

    def _context(self) -> ssl.SSLContext | None:
        return ssl.create_default_context(cafile=self.ca_file) if self.certs else None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    # lifecycle

    def start(self, timeout: float = 15.0) -> None:
        if self.running:
            return
        self.port_file.unlink(missing_ok=True)
        command = [
            sys.executable,
            *("-m", "tests.support.kubeapi"),
            *("--port", str(self.port or 0)),
            *("--state-file", str(self.state_file)),
            *("--port-file", str(self.port_file)),
            *self.options,
        ]
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        }
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                command,
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                preexec_fn=deathsig_preexec(),
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the fake API server exited: {self.log.read_text()[-2000:]}")
            if self.port_file.exists():
                self.port = int(self.port_file.read_text())
                if self._healthy():
                    return
            time.sleep(0.01)
        self.kill()
        raise RuntimeError(f"the fake API server did not answer within {timeout} s")

    def _healthy(self) -> bool:
        try:
            healthz = f"{self.url}/healthz"
            with urllib.request.urlopen(healthz, timeout=1, context=self._context()) as answer:
                return bool(answer.status == 200)
        except OSError:
            return False

    def stop(self) -> None:
        """SIGTERM, as a clean shutdown (the state file is current either way)."""
        self._signal_and_wait(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL, as a crash."""
        self._signal_and_wait(signal.SIGKILL)

    def _signal_and_wait(self, signum: int) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)  # a paused process must be able to die
            self.process.send_signal(signum)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def restart(self) -> None:
        """Kill it and start it again on the same port and state file."""
        self.kill()
        self.start()

    def pause(self) -> None:
        if self.process is not None:
            self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self.process is not None:
            self.process.send_signal(signal.SIGCONT)

    def remove(self) -> None:
        self.kill()
        shutil.rmtree(self.directory, ignore_errors=True)

    # HTTP

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        headers: dict[str, str] | None = None,
    ) -> tuple[int, Any]:
        """(status, decoded JSON body) of one request; HTTP errors are answers, not exceptions.
        On a server that wants credentials, pass them in ``headers`` (Authorization)."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"{self.url}{path}", data=data, method=method)
        if data is not None:
            request.add_header("Content-Type", content_type)
        for name, value in (headers or {}).items():
            request.add_header(name, value)
        try:
            with urllib.request.urlopen(request, timeout=10, context=self._context()) as answer:
                return answer.status, json.loads(answer.read() or b"null")
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read() or b"null")

    def _admin(self, action: str, body: dict[str, Any] | None = None) -> Any:
        code, answer = self.request("POST" if body is not None else "GET", f"/_fake/{action}", body)
        if code != 200:
            raise RuntimeError(f"/_fake/{action}: {code} {answer}")
        return answer

    def create_namespace(self, name: str) -> None:
        code, answer = self.request("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
        if code not in (201, 409):
            raise RuntimeError(f"cannot create namespace {name}: {code} {answer}")

    # fault hooks

    def fail(
        self,
        count: int | None = 1,
        code: int = 500,
        *,
        verb: str | None = None,
        path: str | None = None,
        apply: bool = False,
        retry_after: int = 1,
    ) -> None:
        """The next ``count`` matching requests (None: all, until ``reset_faults``) get ``code``,
        after being carried out if ``apply``."""
        self._admin(
            "fail",
            {
                "count": count,
                "code": code,
                "verb": verb,
                "path": path,
                "apply": apply,
                "retry_after": retry_after,
            },
        )

    def delay(
        self,
        seconds: float,
        *,
        count: int | None = None,
        verb: str | None = None,
        path: str | None = None,
    ) -> None:
        """Answer matching requests ``seconds`` late (``count`` None: until ``reset_faults``)."""
        self._admin("delay", {"seconds": seconds, "count": count, "verb": verb, "path": path})

    def close_watches(self, *, abrupt: bool = False) -> None:
        self._admin("close-watches", {"abrupt": abrupt})

    def compact(self, resource_version: int | None = None) -> int:
        """Forget the watch history up to there (default: all); the oldest version still kept."""
        return int(self._admin("compact", {"resourceVersion": resource_version})["compacted"])

    def reset_faults(self) -> None:
        self._admin("reset", {})

    def stats(self) -> dict[str, Any]:
        """resourceVersion, compacted, objects, watches (open), requests (per verb)."""
        answer: dict[str, Any] = self._admin("stats")
        return answer
