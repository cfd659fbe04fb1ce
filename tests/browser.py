"""Headless Chromium from the OS packages, driven over the DevTools protocol on a pipe (no browser download, no
websocket library): open a page, read its DOM, press keys, move the mouse, take a screenshot, and collect every
console error, uncaught exception and network request the page made."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)
NO_CHROMIUM = "headless Chromium is not installed (Debian: apt-get install chromium; .ci/run does it)"

KEYS = {
    "Escape": ("Escape", 27),
    "ArrowRight": ("ArrowRight", 39),
    "ArrowLeft": ("ArrowLeft", 37),
    "]": ("BracketRight", 221),
    "[": ("BracketLeft", 219),
}


class Browser:
    """One headless Chromium with one page; ``errors`` holds what the page logged as an error or threw."""

    def __init__(self, width: int = 1100, height: int = 900, timeout: float = 60.0):
        assert CHROMIUM is not None
        self.timeout = timeout
        self.errors: list[str] = []
        self.requests: list[str] = []
        self._profile = tempfile.mkdtemp(prefix="chromium-profile-")
        to_browser, self._write = os.pipe()
        self._read, from_browser = os.pipe()

        def fds() -> None:  # the protocol's pipe: the browser reads fd 3 and writes fd 4
            os.dup2(to_browser, 3)
            os.dup2(from_browser, 4)

        self.proc = subprocess.Popen(
            [
                CHROMIUM,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--remote-debugging-pipe",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-extensions",
                f"--user-data-dir={self._profile}",
                f"--window-size={width},{height}",
                "about:blank",
            ],
            pass_fds=(3, 4),
            preexec_fn=fds,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_browser)
        os.close(from_browser)
        self._buf = b""
        self._id = 0
        target = self._call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self._session = self._call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Runtime", "Page", "Log", "Network"):
            self.call(f"{domain}.enable")
        self.viewport(width, height)

    # ------------------------------------------------------------------ the protocol

    def _send(self, method: str, params: dict | None, session: str | None) -> int:
        self._id += 1
        msg: dict[str, Any] = {"id": self._id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._write, json.dumps(msg).encode() + b"\0")
        return self._id

    def _next(self, deadline: float) -> dict:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._read], [], [], left)[0]:
                raise TimeoutError("Chromium did not answer")
            chunk = os.read(self._read, 1 << 16)
            if not chunk:
                raise EOFError("Chromium closed its pipe")
            self._buf += chunk
        raw, _, self._buf = self._buf.partition(b"\0")
        msg = json.loads(raw)
        self._event(msg)
        return msg

    def _event(self, msg: dict) -> None:
        method, p = msg.get("method"), msg.get("params", {})
        if method == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            self.errors.append(" ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", [])))
        elif method == "Runtime.exceptionThrown":
            d = p.get("exceptionDetails", {})
            self.errors.append(d.get("exception", {}).get("description") or d.get("text", "exception"))
        elif method == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
            self.errors.append(p["entry"].get("text", ""))
        elif method == "Network.requestWillBeSent":
            self.requests.append(p.get("request", {}).get("url", ""))

    def _call(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        i = self._send(method, params, session)
        deadline = time.monotonic() + self.timeout
        while True:
            msg = self._next(deadline)
            if msg.get("id") == i:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})

    def call(self, method: str, params: dict | None = None) -> dict:
        return self._call(method, params, self._session)

    def wait_for(self, event: str) -> dict:
        deadline = time.monotonic() + self.timeout
        while True:
            msg = self._next(deadline)
            if msg.get("method") == event:
                return msg.get("params", {})

    # ------------------------------------------------------------------ what a test does

    def open(self, page: Path) -> None:
        self.call("Page.navigate", {"url": page.resolve().as_uri()})
        self.wait_for("Page.loadEventFired")

    def js(self, expression: str) -> Any:
        r = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expression}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def key(self, key: str) -> None:
        code, vk = KEYS[key] if key in KEYS else (f"Key{key.upper()}", ord(key.upper()))
        text = {"text": key} if len(key) == 1 else {}
        for kind in ("keyDown", "keyUp"):
            self.call(
                "Input.dispatchKeyEvent",
                {
                    "type": kind,
                    "key": key,
                    "code": code,
                    "windowsVirtualKeyCode": vk,
                    **(text if kind == "keyDown" else {}),
                },
            )

    def hover(self, selector: str) -> None:
        # scrolled, then two frames: the browser hit-tests input against the last frame it drew
        box = self.js(
            f"(async () => {{ const e = document.querySelector({json.dumps(selector)}); e.scrollIntoView({{block: 'center'}});"
            " await new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)));"
            " const r = e.getBoundingClientRect(); return [r.left + r.width / 2, r.top + r.height / 2]; })()"
        )
        self.call("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": box[0], "y": box[1]})

    def viewport(self, width: int, height: int) -> None:
        self.call(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )

    def screenshot(self, path: Path, full_page: bool = False, clip: dict | None = None) -> Path:
        params: dict[str, Any] = {"format": "png", "captureBeyondViewport": full_page}
        if clip is not None:
            params["clip"] = {**clip, "scale": 1}
        path.write_bytes(base64.b64decode(self.call("Page.captureScreenshot", params)["data"]))
        return path

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._call("Browser.close")
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=20)
        for fd in (self._read, self._write):
            with contextlib.suppress(OSError):
                os.close(fd)
        shutil.rmtree(self._profile, ignore_errors=True)
