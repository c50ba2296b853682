"""The docs site builds offline without a warning, and it and a report.html hold up in a real browser.

The browser checks run headless Chromium (:mod:`tests.browser`) at 1280 and 390 pixels wide: no console error
or failed request, every image loaded, every link inside the site or report resolves (pages, files and
``#anchors``), nothing sticking out past the window. They skip, with the reason, where no Chromium is
installed (``.ci/run`` installs Debian's ``chromium``). With ``LAYA_EVAL_BROWSER_SHOTS=DIR`` the screenshots
are also copied to ``DIR`` (``benchmarks/browser_screenshots.sh`` does this for ``benchmarks/results/browser``).
"""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import subprocess
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests.browser import Browser, find_chromium
from tests.cli_helpers import run

ROOT = Path(__file__).resolve().parents[1]
WIDTHS = (1280, 390)
SHOTS_VAR = "LAYA_EVAL_BROWSER_SHOTS"
CHROMIUM = find_chromium()
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="no Chromium installed (Debian: apt-get install chromium)")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """``mkdocs build --strict`` into a temporary folder; returns (folder, build output)."""
    out = tmp_path_factory.mktemp("site") / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, proc.stdout + proc.stderr


def test_docs_build_strict_without_warnings(site):
    folder, log = site
    assert "WARNING" not in log, log
    pages = sorted(p.relative_to(folder) for p in folder.rglob("index.html"))
    markdown = sorted((ROOT / "docs").rglob("*.md"))
    assert len(pages) == len(markdown), (pages, markdown)  # one page per Markdown file
    api = (folder / "reference" / "api" / "index.html").read_text()
    for name in ("evaluate", "fit_head", "EvalOptions", "paired_comparison"):  # rendered from the docstrings
        assert 'id="laya_eval.' in api and name in api, name
    # Sphinx roles and reST literals in docstrings are rendered as code (docs/sphinx_roles.py), never shown raw.
    for raw in (":func:", ":class:", ":mod:", ":meth:", ":attr:", "``"):
        assert raw not in api, raw
    assert "fonts.googleapis" not in (folder / "index.html").read_text()  # nothing fetched from the network


@pytest.fixture(scope="module")
def served_site(site):
    """The built site on a local HTTP server (directory URLs need one); yields its base URL."""
    handler = functools.partial(_QuietHandler, directory=str(site[0]))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/", site[0]
    server.shutdown()
    server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:  # noqa: D102 - no request log on stderr
        pass


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    if CHROMIUM is None:
        pytest.skip("no Chromium installed (Debian: apt-get install chromium)")
    with Browser(CHROMIUM, tmp_path_factory.mktemp("chromium-profile")) as b:
        yield b


@pytest.fixture(scope="module")
def small_report(digits_checkpoints, tmp_path_factory):
    """A report over two small faithfulness runs and a sanity run; returns report.html."""
    root = tmp_path_factory.mktemp("browser-report")
    for head in ("laya", "scalarmix"):
        res = run(
            "faithfulness", digits_checkpoints[head], "--limit", 40, "--bootstrap", 50, "--out", root / head, "-q"
        )
        assert res.exit_code == 0, res.output
    res = run(
        "sanity",
        digits_checkpoints["laya"],
        "--methods",
        "laya,contribution,random",
        "--roar-seeds",
        1,
        "--epochs",
        2,
        "--limit",
        40,
        "--bootstrap",
        50,
        "--out",
        root / "sanity",
        "-q",
    )
    assert res.exit_code == 0, res.output
    res = run(
        "report", root / "laya", root / "scalarmix", root / "sanity", "--max-points", 40, "--out", root / "report"
    )
    assert res.exit_code == 0, res.output
    return root / "report" / "report.html"


def _shot(tmp_path: Path, name: str) -> Path:
    return tmp_path / f"{name}.png"


def _keep_shot(path: Path) -> None:
    if os.environ.get(SHOTS_VAR):
        target = Path(os.environ[SHOTS_VAR])
        target.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target / path.name)


def _unresolved_file_links(check, base: Path) -> list[str]:
    bad = []
    for link in check.links:
        parsed = urllib.parse.urlparse(link)
        if parsed.scheme != "file":
            bad.append(f"{link} leaves the report")  # a self-contained report links only to itself and its files
            continue
        path = Path(urllib.parse.unquote(parsed.path))
        if path == base and parsed.fragment:
            if parsed.fragment not in check.ids:
                bad.append(f"{link}: no element with that id")
        elif not path.exists():
            bad.append(f"{link}: no such file")
    return bad


def _assert_page_sound(check, unresolved: list[str]) -> None:
    where = f"{check.url} at {check.width} px"
    assert check.errors == [], f"{where}: {check.errors}"
    assert [i["src"] for i in check.images if not i["ok"]] == [], f"{where}: images that did not load"
    assert unresolved == [], f"{where}: {unresolved}"
    assert check.scroll_width <= check.width and check.wide == [], (
        f"{where}: {check.scroll_width} px of content; past the window: {check.wide}"
    )


@needs_chromium
@pytest.mark.parametrize("width", WIDTHS)
def test_report_html_in_a_browser(browser, small_report, width, tmp_path):
    shot = _shot(tmp_path, f"report-{width}")
    check = browser.check(small_report.as_uri(), width, screenshot=shot)
    assert len(check.images) >= 5 and len(check.links) >= 5  # figures and the table of contents were looked at
    _assert_page_sound(check, _unresolved_file_links(check, small_report))
    assert shot.stat().st_size > 10_000
    _keep_shot(shot)


class _SiteLinks:
    """Resolves links inside the served site: the page exists and, for ``#anchor``, holds that id."""

    def __init__(self, base: str) -> None:
        self.base, self.pages = base, {}

    def _page(self, url: str) -> str | None:
        if url not in self.pages:
            try:
                with urllib.request.urlopen(url, timeout=30) as response:
                    self.pages[url] = response.read().decode("utf-8", "replace")
            except urllib.error.URLError:
                self.pages[url] = None
        return self.pages[url]

    def unresolved(self, check) -> list[str]:
        bad = []
        for link in check.links:
            if not link.startswith(self.base):
                continue  # another site (the theme's credit line): not followed, the suite is offline
            url, _, fragment = link.partition("#")
            text = self._page(url)
            if text is None:
                bad.append(f"{link}: not found")
            elif fragment and f'id="{fragment}"' not in text:
                bad.append(f"{link}: no element with that id")
        return bad


@needs_chromium
def test_docs_site_in_a_browser(browser, served_site, tmp_path):
    base, folder = served_site
    links = _SiteLinks(base)
    pages = sorted(str(p.parent.relative_to(folder)) for p in folder.rglob("index.html"))
    checked = 0
    for page in pages:
        url = base + ("" if page == "." else page + "/")
        for width in WIDTHS:
            name = f"docs-{page.replace('/', '-')}-{width}" if page == "commands/faithfulness" else None
            check = browser.check(url, width, screenshot=_shot(tmp_path, name) if name else None)
            _assert_page_sound(check, links.unresolved(check))
            if name:
                _keep_shot(_shot(tmp_path, name))
            checked += 1
    assert checked == 2 * len(pages) and len(pages) >= 20


@needs_chromium
def test_the_browser_check_sees_errors_broken_images_and_overflow(browser, tmp_path):
    """The checks can fail: a console error logged after the load event, a script exception, an image that does
    not load and an element wider than the window are each reported."""
    page = tmp_path / "bad.html"
    page.write_text(
        "<!doctype html><html><body><img src='missing.png' alt=''>"
        "<div style='width: 2000px'>wide</div>"
        "<script>setTimeout(() => console.error('late error'), 50);"
        "setTimeout(() => { throw new Error('late exception'); }, 60);</script></body></html>"
    )
    check = browser.check(page.as_uri(), 390)
    assert any("late error" in e for e in check.errors), check.errors
    assert any("late exception" in e for e in check.errors), check.errors
    assert [i["src"] for i in check.images if not i["ok"]] == [(tmp_path / "missing.png").as_uri()]
    assert check.scroll_width > 390 and any(w.startswith("div") for w in check.wide), check.wide
