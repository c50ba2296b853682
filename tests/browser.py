"""Headless Chromium driven over the DevTools protocol, with the standard library only.

:class:`Browser` starts ``chromium`` with a private profile and a DevTools port, opens one page target and
talks to it over a minimal WebSocket client (RFC 6455: masked text frames out, text frames in).
:meth:`Browser.check` loads a URL at a window width and returns what the page tests look at: console errors,
failed requests, images that did not load, the page's links, and the elements wider than the window.
"""

from __future__ import annotations

import base64
import json
import os
import select
import shutil
import socket
import struct
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

# After the load event a page counts as settled once no DevTools event arrived for QUIET_S (late console messages,
# requests a script makes after loading, their responses), waiting at most SETTLE_MAX_S.
QUIET_S = 0.1
SETTLE_MAX_S = 3.0

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--remote-debugging-port=0",
    "--remote-allow-origins=*",
)

# Runs in the page once it has loaded: images, links and what sticks out past the window.
INSPECT = r"""
(() => {
  const width = window.innerWidth;
  const images = [...document.images].map(i => ({src: i.currentSrc || i.src, ok: i.complete && i.naturalWidth > 0}));
  const links = [...document.querySelectorAll('a[href]')].map(a => a.href);
  const clipped = el => {
    for (let p = el.parentElement; p; p = p.parentElement) {
      const s = getComputedStyle(p);
      if (['auto', 'scroll', 'hidden', 'clip'].includes(s.overflowX) && p !== document.body
          && p !== document.documentElement) return true;
    }
    return false;
  };
  const wide = [];
  for (const el of document.body.querySelectorAll('*')) {
    const r = el.getBoundingClientRect();
    const s = getComputedStyle(el);
    if (r.width === 0 || s.visibility === 'hidden' || s.display === 'none' || s.position === 'fixed') continue;
    if (r.right > width + 1 && !clipped(el))
      wide.push(`${el.tagName.toLowerCase()}${el.id ? '#' + el.id : ''}${el.className && typeof el.className === 'string' ? '.' + el.className.split(' ')[0] : ''} [${Math.round(r.left)}, ${Math.round(r.right)}]`);
  }
  const ids = [...document.querySelectorAll('[id]')].map(e => e.id);
  return {width, scrollWidth: document.documentElement.scrollWidth, images, links, wide: wide.slice(0, 20), ids};
})()
"""


def find_chromium() -> str | None:
    """The path of an installed Chromium, or None."""
    return next((p for p in map(shutil.which, CHROMIUM_NAMES) if p), None)


class _WebSocket:
    """Just enough of a WebSocket client for one DevTools connection on localhost."""

    def __init__(self, url: str, timeout: float) -> None:
        rest = url.split("://", 1)[1]
        host_port, _, path = rest.partition("/")
        host, _, port = host_port.partition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(
            (
                f"GET /{path} HTTP/1.1\r\nHost: {host_port}\r\nUpgrade: websocket\r\n"
                f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
            ).encode()
        )
        response = b""
        while b"\r\n\r\n" not in response:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise ConnectionError("DevTools closed the connection during the handshake")
            response += chunk
        head, _, self.buffer = response.partition(b"\r\n\r\n")
        if b" 101 " not in head.split(b"\r\n", 1)[0]:
            raise ConnectionError(f"DevTools refused the WebSocket: {head[:200]!r}")

    def _read(self, n: int) -> bytes:
        while len(self.buffer) < n:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise ConnectionError("DevTools closed the connection")
            self.buffer += chunk
        data, self.buffer = self.buffer[:n], self.buffer[n:]
        return data

    def send(self, text: str) -> None:
        payload = text.encode()
        mask = os.urandom(4)
        n = len(payload)
        header = bytes([0x81]) + (
            bytes([0x80 | n])
            if n < 126
            else bytes([0x80 | 126]) + struct.pack(">H", n)
            if n < 1 << 16
            else bytes([0x80 | 127]) + struct.pack(">Q", n)
        )
        self.sock.sendall(header + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))

    def receive(self) -> str:
        message = b""
        while True:
            first, second = self._read(2)
            n = second & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._read(8))[0]
            payload = self._read(n)
            opcode = first & 0x0F
            if opcode == 0x8:
                raise ConnectionError("DevTools closed the WebSocket")
            if opcode in (0x0, 0x1, 0x2):
                message += payload
                if first & 0x80:
                    return message.decode()

    def close(self) -> None:
        self.sock.close()


@dataclass
class PageCheck:
    """What one load of a page showed."""

    url: str
    width: int
    errors: list[str] = field(default_factory=list)
    images: list[dict] = field(default_factory=list)
    links: list[str] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)
    wide: list[str] = field(default_factory=list)
    scroll_width: int = 0


class Browser:
    """One headless Chromium with one page; use as a context manager."""

    def __init__(self, executable: str, profile: Path, timeout: float = 60.0) -> None:
        self.timeout = timeout
        self.process = subprocess.Popen(
            [executable, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + timeout
        while not (port_file.is_file() and len(port_file.read_text().splitlines()) >= 2):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"{executable} did not open its DevTools port")
            time.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        request = urllib.request.Request(f"http://127.0.0.1:{port}/json/new?about:blank", method="PUT")
        with urllib.request.urlopen(request, timeout=timeout) as response:
            target = json.load(response)
        self.ws = _WebSocket(target["webSocketDebuggerUrl"], timeout)
        self.next_id = 0
        self.events: list[dict] = []
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(f"{domain}.enable")

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if getattr(self, "ws", None) is not None:
            self.ws.close()
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def call(self, method: str, **params) -> dict:
        """Send one DevTools command and return its result; events that arrive meanwhile are kept."""
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.receive())
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            self.events.append(message)

    def _wait_for(self, method: str) -> None:
        deadline = time.monotonic() + self.timeout
        while not any(e.get("method") == method for e in self.events):
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {method} within {self.timeout} s")
            self.events.append(json.loads(self.ws.receive()))

    def _settle(self) -> None:
        """Read events until none arrived for :data:`QUIET_S` (at most :data:`SETTLE_MAX_S`)."""
        deadline = time.monotonic() + SETTLE_MAX_S
        while time.monotonic() < deadline:
            if not self.ws.buffer and not select.select([self.ws.sock], [], [], QUIET_S)[0]:
                return
            self.events.append(json.loads(self.ws.receive()))

    def check(self, url: str, width: int, height: int = 900, screenshot: Path | None = None) -> PageCheck:
        """Load ``url`` in a window ``width`` pixels wide and inspect it (and save a screenshot if asked)."""
        self.call(
            "Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=width < 600
        )
        self.events = []
        self.call("Page.navigate", url=url)
        self._wait_for("Page.loadEventFired")
        self._settle()
        found = self.call("Runtime.evaluate", expression=INSPECT, returnByValue=True)["result"]["value"]
        result = PageCheck(
            url,
            width,
            images=found["images"],
            links=found["links"],
            ids=found["ids"],
            wide=found["wide"],
            scroll_width=found["scrollWidth"],
        )
        failed_requests = {
            e["params"]["requestId"]: e["params"]["request"]["url"]
            for e in self.events
            if e.get("method") == "Network.requestWillBeSent"
        }
        for event in self.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                result.errors.append(
                    "console: " + " ".join(str(a.get("value", a.get("description"))) for a in params.get("args", []))
                )
            elif method == "Runtime.exceptionThrown":
                details = params["exceptionDetails"]
                result.errors.append(
                    "exception: " + str(details.get("exception", {}).get("description") or details.get("text"))
                )
            elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
                result.errors.append(f"log: {params['entry']['text']} {params['entry'].get('url', '')}")
            elif method == "Network.loadingFailed" and not params.get("canceled"):
                result.errors.append(
                    f"request failed: {failed_requests.get(params['requestId'])} ({params.get('errorText')})"
                )
            elif method == "Network.responseReceived" and params["response"]["status"] >= 400:
                result.errors.append(f"HTTP {params['response']['status']}: {params['response']['url']}")
        if screenshot is not None:
            data = self.call("Page.captureScreenshot", format="png")["data"]
            screenshot.parent.mkdir(parents=True, exist_ok=True)
            screenshot.write_bytes(base64.b64decode(data))
        return result
