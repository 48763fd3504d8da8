"""Headless Debian Chromium driven over the DevTools protocol (CDP), for tests.

Just enough of CDP to use a page as a person would: navigate, click at an
element's position, type, press keys, read the page, take a screenshot.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from websockets.sync.client import connect

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# Flags for this sandbox (see the machine notes): no GPU, no outbound network.
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--autoplay-policy=no-user-gesture-required",
    "--window-size=900,1000",
    "--remote-debugging-port=0",
]


def chromium_missing() -> str | None:
    if Path(CHROMIUM).exists():
        return None
    return "chromium not found: install Debian's 'chromium' package (hack/install-tools.sh does)"


class Page:
    def __init__(self, ws):
        self._ws = ws
        self._ids = itertools.count(1)
        self.console: list[str] = []
        self.exceptions: list[str] = []

    def send(self, method: str, **params):
        call_id = next(self._ids)
        self._ws.send(json.dumps({"id": call_id, "method": method, "params": params}))
        while True:
            message = json.loads(self._ws.recv(timeout=30))
            if message.get("id") == call_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            self._event(message)

    def _event(self, message):
        if message.get("method") == "Runtime.consoleAPICalled":
            args = message["params"]["args"]
            self.console.append(
                f"{message['params']['type']}: "
                + " ".join(str(a.get("value", a.get("description"))) for a in args)
            )
        elif message.get("method") == "Runtime.exceptionThrown":
            self.exceptions.append(json.dumps(message["params"]["exceptionDetails"])[:500])

    def evaluate(self, expression: str):
        result = self.send(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in result:
            raise RuntimeError(result["exceptionDetails"])
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout_s: float = 30.0):
        deadline = time.monotonic() + timeout_s
        while not (value := self.evaluate(expression)):
            if time.monotonic() > deadline:
                raise TimeoutError(f"page never satisfied: {expression}")
            time.sleep(0.1)
        return value

    def click(self, selector: str) -> None:
        box = self.evaluate(
            f"(() => {{ const r = document.querySelector({json.dumps(selector)}).getBoundingClientRect();"
            " return [r.x + r.width / 2, r.y + r.height / 2]; })()"
        )
        for kind in ("mousePressed", "mouseReleased"):
            self.send(
                "Input.dispatchMouseEvent",
                type=kind,
                x=box[0],
                y=box[1],
                button="left",
                clickCount=1,
            )

    def type(self, text: str) -> None:
        self.send("Input.insertText", text=text)

    def press(self, key: str, code: str, key_code: int) -> None:
        for kind in ("keyDown", "keyUp"):
            self.send(
                "Input.dispatchKeyEvent",
                type=kind,
                key=key,
                code=code,
                windowsVirtualKeyCode=key_code,
            )

    def select_all(self) -> None:
        self.send(
            "Input.dispatchKeyEvent",
            type="keyDown",
            key="a",
            code="KeyA",
            modifiers=2,
            windowsVirtualKeyCode=65,
            commands=["selectAll"],
        )
        self.send(
            "Input.dispatchKeyEvent",
            type="keyUp",
            key="a",
            code="KeyA",
            modifiers=2,
            windowsVirtualKeyCode=65,
        )

    def screenshot(self, path: Path) -> bytes:
        data = base64.b64decode(self.send("Page.captureScreenshot", format="png")["data"])
        path.write_bytes(data)
        return data


class Browser:
    """`with Browser() as browser: page = browser.open(url)`"""

    def __enter__(self):
        self._profile = tempfile.TemporaryDirectory(prefix="chromium-profile-")
        self._process = subprocess.Popen(
            [CHROMIUM, *FLAGS, f"--user-data-dir={self._profile.name}", "about:blank"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            # Its own process group: the renderer and helper processes it forks
            # write to the profile too, and must be gone before it is removed.
            start_new_session=True,
        )
        port_file = Path(self._profile.name) / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not port_file.exists() or len(port_file.read_text().splitlines()) < 2:
            if self._process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("chromium did not start")
            time.sleep(0.05)
        self.port = int(port_file.read_text().splitlines()[0])
        self._sockets = contextlib.ExitStack()
        return self

    def open(self, url: str) -> Page:
        import httpx

        targets = httpx.get(f"http://127.0.0.1:{self.port}/json/list").json()
        target = next(t for t in targets if t["type"] == "page")
        ws = self._sockets.enter_context(
            connect(target["webSocketDebuggerUrl"], max_size=None, open_timeout=10)
        )
        page = Page(ws)
        page.send("Runtime.enable")
        page.send("Page.enable")
        page.send("Page.navigate", url=url)
        page.wait_for("document.readyState === 'complete'")
        return page

    def __exit__(self, *exc):
        self._sockets.close()
        group = os.getpgid(self._process.pid)
        os.killpg(group, signal.SIGTERM)
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)  # whatever of the group outlived the browser
        self._process.wait()
        self._profile.cleanup()
