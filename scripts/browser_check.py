"""Open every page of the built book in headless Chromium and report what a reader would see broken.

    python scripts/browser_check.py [_build/html]     # prints one line per page, exit 1 on problems

Per page: console errors and uncaught exceptions, failed requests, broken images, links within the
book to missing pages or anchors, math that MathJax did not render (a .math element without
MathJax's output, or TeX delimiters left as text), code or output that scrolls sideways instead of
wrapping, and figures shown too small to read (under MIN_FIGURE_PX tall); a full-page screenshot of
each page, at a 1400-px-wide window, goes to _build/screenshots/. Chromium is driven through the
DevTools protocol over a pipe (--remote-debugging-pipe), so no driver or extra Python package is needed.

The network is blocked, as for a reader offline: the book is served from 127.0.0.1, Chromium resolves
no other host name, and every request leaving 127.0.0.1 is refused and reported, so a page that needs
the network for anything (MathJax from a CDN included) fails.
"""

from __future__ import annotations

import base64
import functools
import http.server
import json
import os
import re
import select
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urljoin, urlparse

ROOT = Path(__file__).resolve().parents[1]
FLAGS = [
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",  # offline, but for the book's server
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--remote-debugging-pipe",
    # keep rendering frames for the one tab even though no window is ever shown
    "--disable-renderer-backgrounding",
    "--disable-backgrounding-occluded-windows",
    "--disable-background-timer-throttling",
]
WINDOW = {"width": 1400, "height": 900}  # CSS px: a laptop's browser window
MIN_FIGURE_PX = 150  # a figure shown shorter than this has text too small to read
REDIRECT = re.compile(r'<meta http-equiv="Refresh" content="\d+; url=([^"]+)"', re.IGNORECASE)
PAGE_STATE = r"""(async () => {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) { await MathJax.startup.promise; }
  const math = [...document.querySelectorAll('.math')];
  return {
    math: math.length,
    unrendered: math.filter(m => !m.querySelector('mjx-container')).map(m => m.textContent.slice(0, 60)),
    // TeX delimiters \( and \[ left in the text a reader sees (outside the tags MathJax skips)
    rawTex: (() => {
      const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT, {acceptNode: n =>
        n.parentElement.closest('script, noscript, style, textarea, pre, code, mjx-container')
          ? NodeFilter.FILTER_REJECT : NodeFilter.FILTER_ACCEPT});
      const raw = [];
      while (walker.nextNode()) {
        const text = walker.currentNode.textContent;
        if (/\\[(\[]/.test(text)) raw.push(text.trim().slice(0, 60));
      }
      return raw;
    })(),
    mathErrors: window.MathJax && MathJax.startup && MathJax.startup.document
      ? [...MathJax.startup.document.math].filter(m => m.typesetRoot && m.typesetRoot.querySelector('mjx-merror'))
          .map(m => m.typesetRoot.querySelector('mjx-merror').getAttribute('data-mjx-error')
                    + ` in ${JSON.stringify(m.math.slice(0, 80))}`)
      : [],
    brokenImages: [...document.images].filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src),
    // blocks and figures on display (one in a closed dropdown has no size until opened)
    sideways: [...document.querySelectorAll('article pre')]
      .filter(p => p.getClientRects().length && p.scrollWidth > p.clientWidth + 1)
      .map(p => p.textContent.trim().split('\n')[0].slice(0, 60)),
    smallFigures: [...document.querySelectorAll('article img')]
      .filter(i => i.getClientRects().length && i.naturalWidth > 0)
      .map(i => ({src: i.src.split('/').pop(), height: Math.round(i.getBoundingClientRect().height)}))
      .filter(f => f.height < MIN_FIGURE_PX),
    links: [...document.querySelectorAll('a[href]')].map(a => a.href),
    title: document.title,
  };
})()""".replace("MIN_FIGURE_PX", str(MIN_FIGURE_PX))


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


@dataclass
class PageReport:
    page: str
    problems: list = field(default_factory=list)
    math: int = 0
    screenshot: Path | None = None


class Browser:
    """A headless Chromium with one tab, spoken to in DevTools-protocol messages over two pipes."""

    def __init__(self, executable: str, timeout: float = 60.0):
        self.timeout = timeout
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()
        self._profile = tempfile.mkdtemp(prefix="book-chromium-")

        def pipes_at_3_and_4():  # the fds Chromium reads commands from and writes replies to
            os.dup2(to_child_r, 3)
            os.dup2(from_child_w, 4)

        self.proc = subprocess.Popen(
            [executable, *FLAGS, f"--user-data-dir={self._profile}", "about:blank"],
            preexec_fn=pipes_at_3_and_4,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            close_fds=False,
        )  # False: keep 3 and 4
        os.close(to_child_r)
        os.close(from_child_w)
        self._buffer = b""
        self._next_id = 0
        self._replies: dict[int, dict] = {}
        self.events: list[dict] = []
        self.on_event = None
        # The tab Chromium opened: a second, background tab would render no frames to screenshot.
        tabs = [t for t in self.call("Target.getTargets")["targetInfos"] if t["type"] == "page"]
        target = tabs[0]["targetId"] if tabs else self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]

    def _read_message(self, deadline: float) -> dict:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._from_child], [], [], left)[0]:
                raise TimeoutError("Chromium did not answer in time")
            chunk = os.read(self._from_child, 1 << 20)
            if not chunk:
                raise RuntimeError("Chromium closed the DevTools pipe (did it crash?)")
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)

    def call(self, method: str, params: dict | None = None, session: bool = False) -> dict:
        self._next_id += 1
        my_id = self._next_id
        message = {"id": my_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = self.session
        os.write(self._to_child, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        while my_id not in self._replies:  # an event handler may call in between: replies wait here
            self._receive(deadline)
        msg = self._replies.pop(my_id)
        if "error" in msg:
            raise RuntimeError(f"{method}: {msg['error'].get('message')}")
        return msg.get("result", {})

    def _receive(self, deadline: float):
        msg = self._read_message(deadline)
        if "id" in msg:
            self._replies[msg["id"]] = msg
        elif "method" in msg:
            self._dispatch(msg)

    def _dispatch(self, msg: dict):
        if self.on_event and self.on_event(msg):
            return
        self.events.append(msg)

    def wait_for(self, method: str, timeout: float | None = None) -> dict:
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            for i, msg in enumerate(self.events):
                if msg["method"] == method:
                    return self.events.pop(i)
            self._receive(deadline)

    def close(self):
        try:
            self.call("Browser.close")
        except (RuntimeError, TimeoutError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._to_child, self._from_child):
            os.close(fd)
        shutil.rmtree(self._profile, ignore_errors=True)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def serve(directory: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    """The built HTML on 127.0.0.1 at a free port, in a background thread."""
    handler = functools.partial(_QuietHandler, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/"


def pages(html: Path) -> list[str]:
    """Every HTML page of the book, relative to its root (theme assets excluded)."""
    return sorted(
        str(p.relative_to(html)) for p in html.rglob("*.html") if not p.relative_to(html).parts[0].startswith("_")
    )


def _anchors(path: Path, cache: dict) -> set:
    if path not in cache:
        cache[path] = set(re.findall(r'\bid="([^"]+)"', path.read_text(errors="replace")))
    return cache[path]


def check_link(href: str, base: str, html: Path, cache: dict) -> str | None:
    """A problem with a link inside the book, or None (links leaving the book are not followed)."""
    url = urlparse(href)
    if not href.startswith(base) or url.scheme not in ("http", "https"):
        return None
    rel = unquote(url.path[len(urlparse(base).path) :])
    target = html / rel
    if target.is_dir():
        target = target / "index.html"
    if not target.exists():
        return f"broken link to {rel}"
    if url.fragment and target.suffix == ".html" and unquote(url.fragment) not in _anchors(target, cache):
        return f"link to a missing anchor {rel}#{url.fragment}"
    return None


def run(html: Path, screenshots: Path, executable: str, only: list[str] | None = None) -> list[PageReport]:
    """Check every page (or those in ``only``); returns one report per page."""
    screenshots.mkdir(parents=True, exist_ok=True)
    server, base = serve(html)
    browser = Browser(executable)
    external: list[str] = []

    def answer_requests(msg: dict) -> bool:
        """Fetch.requestPaused: let the book's own server through, refuse the rest."""
        if msg.get("method") != "Fetch.requestPaused":
            return False
        p = msg["params"]
        url = p["request"]["url"]
        if url.startswith(base):
            browser.call("Fetch.continueRequest", {"requestId": p["requestId"]}, session=True)
        else:
            external.append(url)
            browser.call(
                "Fetch.failRequest", {"requestId": p["requestId"], "errorReason": "BlockedByClient"}, session=True
            )
        return True

    browser.on_event = answer_requests
    reports = []
    link_cache: dict = {}
    try:
        for domain in ("Page", "Runtime", "Log", "Network"):
            browser.call(f"{domain}.enable", session=True)
        browser.call("Page.bringToFront", session=True)
        browser.call("Fetch.enable", {"patterns": [{"urlPattern": "*"}]}, session=True)
        browser.call(
            "Emulation.setDeviceMetricsOverride",
            {**WINDOW, "deviceScaleFactor": 1, "mobile": False},
            session=True,
        )
        for page in only or pages(html):
            browser.events.clear()
            external.clear()
            report = PageReport(page)
            redirect = REDIRECT.search((html / page).read_text(errors="replace"))
            if redirect:  # a page that only forwards the reader (index.html): its target must exist
                problem = check_link(urljoin(base + page, redirect.group(1)), base, html, link_cache)
                report.problems += [problem] if problem else []
                reports.append(report)
                continue
            browser.call("Page.navigate", {"url": base + page}, session=True)
            browser.wait_for("Page.loadEventFired")
            state = browser.call(
                "Runtime.evaluate",
                {"expression": PAGE_STATE, "awaitPromise": True, "returnByValue": True},
                session=True,
            )
            if "exceptionDetails" in state:
                report.problems.append(f"the page check itself failed: {state['exceptionDetails'].get('text')}")
                reports.append(report)
                continue
            value = state["result"]["value"]
            report.math = value["math"]
            report.problems += [f"math not rendered: {t!r}" for t in value["unrendered"]]
            report.problems += [f"raw TeX on the page: {t!r}" for t in value["rawTex"]]
            report.problems += [f"MathJax error (bad TeX): {e}" for e in value["mathErrors"]]
            report.problems += [f"broken image {src}" for src in value["brokenImages"]]
            report.problems += [f"code scrolls sideways: {t!r}" for t in value["sideways"]]
            report.problems += [
                f"figure {f['src']} shown {f['height']} px tall (under {MIN_FIGURE_PX}): too small to read"
                for f in value["smallFigures"]
            ]
            for href in sorted(set(value["links"])):
                problem = check_link(href, base, html, link_cache)
                if problem:
                    report.problems.append(problem)
            report.problems += _console_problems(browser.events)
            report.problems += [f"needs the network: {url}" for url in sorted(set(external))]
            shot = browser.call("Page.captureScreenshot", full_page(browser), session=True)
            report.screenshot = screenshots / (page.replace("/", "__").removesuffix(".html") + ".png")
            report.screenshot.write_bytes(base64.b64decode(shot["data"]))
            reports.append(report)
    finally:
        browser.close()
        server.shutdown()
        server.server_close()
    return reports


def full_page(browser: Browser) -> dict:
    """Page.captureScreenshot's parameters for the whole page, not only the window's first screen."""
    size = browser.call("Page.getLayoutMetrics", session=True)["cssContentSize"]
    clip = {"x": 0, "y": 0, "width": max(size["width"], WINDOW["width"]), "height": size["height"], "scale": 1}
    return {"format": "png", "captureBeyondViewport": True, "clip": clip}


def _console_problems(events: list[dict]) -> list[str]:
    out = []
    for e in events:
        m, p = e["method"], e.get("params", {})
        if m == "Runtime.exceptionThrown":
            d = p["exceptionDetails"]
            out.append(f"uncaught exception: {d.get('exception', {}).get('description', d.get('text'))}"[:300])
        elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            args = " ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", []))
            out.append(f"console error: {args}"[:300])
        elif m == "Log.entryAdded" and p["entry"].get("level") == "error":
            entry = p["entry"]
            if "net::ERR_BLOCKED_BY_CLIENT" not in entry.get("text", ""):  # reported as 'needs the network'
                out.append(f"console error: {entry.get('text')} {entry.get('url', '')}".strip()[:300])
        elif m == "Network.responseReceived" and p["response"]["status"] >= 400:
            out.append(f"HTTP {p['response']['status']} for {p['response']['url']}")
    return out


def main() -> int:
    html = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "_build" / "html"
    executable = find_chromium()
    if executable is None:
        print("no Chromium found: `apt-get install chromium` (.ci/run does it in CI)")
        return 2
    reports = run(html, html.parent / "screenshots", executable)
    for r in reports:
        print(f"{'ok  ' if not r.problems else 'FAIL'} {r.page} ({r.math} math)")
        for problem in r.problems:
            print(f"     {problem}")
    bad = sum(1 for r in reports if r.problems)
    print(f"{len(reports) - bad} pages fine, {bad} with problems; screenshots in {html.parent / 'screenshots'}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
