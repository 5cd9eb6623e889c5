"""A real browser for tests: Debian's Chromium, headless, driven through the DevTools protocol
(a WebSocket per page, ``websocket-client``), no WebDriver in between.

``Browser(directory)`` starts ``chromium`` with its own profile in ``directory`` and a debugging
port of its choosing (read from the profile's ``DevToolsActivePort``), attaches to its first
page, and collects every uncaught JavaScript exception in ``errors``. ``goto``, ``evaluate``
(an expression's value, promises awaited) and ``screenshot`` (a PNG) are what the tests use.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import pytest

__all__ = ("Browser", "chromium")


def chromium() -> str:
    """The browser's executable, or skip: ``scripts/test`` installs Debian's ``chromium``."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.skip("Debian's chromium is not installed (scripts/test installs it)")
    return found


class BrowserError(AssertionError):
    pass


class Browser:
    def __init__(self, directory: Path, *, width: int = 1200, height: int = 900) -> None:
        import websocket  # websocket-client (dev extra)

        self.directory = directory
        profile = directory / "chromium-profile"
        profile.mkdir(parents=True, exist_ok=True)
        args = [
            chromium(),
            "--headless",
            "--disable-gpu",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-extensions",
            "--remote-debugging-port=0",
            f"--user-data-dir={profile}",
            f"--window-size={width},{height}",
            "about:blank",
        ]
        if os.geteuid() == 0:
            args.insert(1, "--no-sandbox")  # Chromium refuses to sandbox as root
        self.log = open(directory / "chromium.log", "wb")  # noqa: SIM115 (closed in close())
        self.proc = subprocess.Popen(
            args, stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
        self.errors: list[str] = []
        self._id = 0
        try:
            port = self._port(profile / "DevToolsActivePort")
            targets = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list"))
            page = next(t for t in targets if t["type"] == "page")
            self.ws = websocket.create_connection(
                page["webSocketDebuggerUrl"], timeout=30, suppress_origin=True
            )
            self.call("Runtime.enable")
            self.call("Page.enable")
        except BaseException:
            self.close()
            raise

    def _port(self, active: Path) -> int:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise BrowserError(f"chromium exited {self.proc.returncode}: see {self.log.name}")
            try:
                first = active.read_text().splitlines()[0]
                return int(first)
            except (FileNotFoundError, IndexError, ValueError):
                time.sleep(0.05)
        raise BrowserError("chromium opened no debugging port in 60 s")

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        ws = getattr(self, "ws", None)
        if ws is not None:
            ws.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """Send one command; its result (events that come meanwhile are noted)."""
        self._id += 1
        self.ws.send(json.dumps({"id": self._id, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("method") == "Runtime.exceptionThrown":
                details = message["params"]["exceptionDetails"]
                self.errors.append(details.get("exception", {}).get("description") or str(details))
            if message.get("id") == self._id:
                if "error" in message:
                    raise BrowserError(f"{method}: {message['error']}")
                result: dict[str, Any] = message["result"]
                return result

    def evaluate(self, expression: str) -> Any:
        """The value of ``expression`` in the page (JSON-like; a promise is awaited)."""
        result = self.call(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in result:
            raise BrowserError(f"{expression!r} raised: {result['exceptionDetails']}")
        return result["result"].get("value")

    def goto(self, url: str) -> None:
        answer = self.call("Page.navigate", url=url)
        if answer.get("errorText"):
            raise BrowserError(f"cannot load {url}: {answer['errorText']}")
        self.wait_for("document.readyState === 'complete'", f"{url} to load")

    def wait_for(self, expression: str, what: str, within: float = 30.0) -> Any:
        """Poll ``expression`` in the page until truthy. The bound turns a hang into a failure."""
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(0.1)
        raise BrowserError(f"timed out waiting for {what} ({expression})")

    def screenshot(self, path: Path) -> Path:
        """The page as a PNG at ``path``, the whole page however long."""
        size = self.call("Page.getLayoutMetrics")["cssContentSize"]
        shot = self.call(
            "Page.captureScreenshot",
            format="png",
            captureBeyondViewport=True,
            clip={"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1},
        )
        path.write_bytes(base64.b64decode(shot["data"]))
        return path
