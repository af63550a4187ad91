"""The rendered book, as a reader's browser shows it.

Opens every page of ``_build/html`` (from ``jupyter-book build .``) in headless Chromium, served
from a local HTTP server, and fails on what a reader would hit: a console error or uncaught script
error, a request for one of the book's own files that fails, an image that does not load, a formula
that MathJax did not typeset (or typeset as an error), raw TeX left in the text, a page wider than
the window, or an output cell that cuts its text off instead of scrolling. Every request to another
host is refused, so a page that needs the network to render fails here too.

Each page's full-page screenshot goes to ``_build/screenshots/`` for a human to look at.

Needs Debian's ``chromium`` (``/usr/bin/chromium``, or ``LRP_BOOK_CHROMIUM``) and the ``playwright``
package, which only drives that binary (no browser download). Without a build the tests skip, unless
``LRP_BOOK_REQUIRE_BUILD=1`` (as ``.ci/browser`` sets): then a missing build, browser or driver fails.
``LRP_BOOK_HTML`` points the test at another build folder.
"""
import functools
import http.server
import os
import posixpath
import re
import shutil
import threading
import warnings
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
HTML = Path(os.environ.get("LRP_BOOK_HTML", ROOT / "_build" / "html")).resolve()
SCREENSHOTS = HTML.parent / "screenshots"
REQUIRE = os.environ.get("LRP_BOOK_REQUIRE_BUILD") == "1"
CHROMIUM = os.environ.get("LRP_BOOK_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# A laptop's window: the width at which the book must read without horizontal scrolling.
VIEWPORT = {"width": 1280, "height": 900}
PAGE_TIMEOUT_MS = 60_000


def unavailable(reason):
    """Skip, or fail when the build is required (CI, after `jupyter-book build`)."""
    if REQUIRE:
        pytest.fail(f"{reason} (LRP_BOOK_REQUIRE_BUILD=1)", pytrace=False)
    pytest.skip(reason)


def pages():
    """Every HTML page of the build, relative to the build folder."""
    if not (HTML / "index.html").is_file():
        return []
    return sorted(
        p.relative_to(HTML).as_posix()
        for p in HTML.rglob("*.html")
        if not p.relative_to(HTML).parts[0].startswith(("_", "."))
    )


PAGES = pages()


def toc_pages():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]]
    for part in toc.get("parts", []):
        files += [chapter["file"] for chapter in part.get("chapters", [])]
    return [f"{f}.html" for f in files]


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):
        pass


@pytest.fixture(scope="module")
def server():
    if not PAGES:
        unavailable(f"no book build at {HTML}: run `jupyter-book build .` first")
    handler = functools.partial(QuietHandler, directory=str(HTML))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(scope="module")
def browser():
    if not PAGES:
        unavailable(f"no book build at {HTML}: run `jupyter-book build .` first")
    if not Path(CHROMIUM).is_file():
        unavailable(f"no Chromium at {CHROMIUM}: `apt-get install chromium` (or set LRP_BOOK_CHROMIUM)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("the `playwright` package is not installed (pip install -r requirements.txt)")
    shutil.rmtree(SCREENSHOTS, ignore_errors=True)
    SCREENSHOTS.mkdir(parents=True)
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


def test_book_was_built():
    if not PAGES:
        unavailable(f"no book build at {HTML}: run `jupyter-book build .` first")
    missing = [page for page in toc_pages() if page not in PAGES]
    assert not missing, f"pages in _toc.yml that the build did not write: {missing}"


# Runs in the page once MathJax has finished: what a reader would see go wrong.
INSPECT_JS = r"""
() => {
  const out = {};
  const imgs = Array.from(document.images);
  out.broken_images = imgs
    .filter(img => !(img.complete && img.naturalWidth > 0))
    .map(img => img.getAttribute('src'));
  const math = Array.from(document.querySelectorAll('.math'));
  out.n_math = math.length;
  out.untypeset = math
    .filter(el => !el.querySelector('mjx-container'))
    .map(el => el.textContent.trim().slice(0, 80));
  out.tex_errors = Array.from(document.querySelectorAll('mjx-merror'))
    .map(el => (el.getAttribute('data-mjx-error') || el.textContent).slice(0, 80));
  // Raw TeX in text that is not code: a delimiter MathJax should have consumed.
  const skip = 'pre, code, script, style, textarea, mjx-container, .highlight, .math';
  const raw = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  const pattern = /\\\(|\\\)|\\\[|\\\]|\$\$|\\begin\{|\$(?!\s)[^$]*?\\[A-Za-z]+[^$]*?\$/;
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const parent = node.parentElement;
    if (!parent || parent.closest(skip)) continue;
    if (pattern.test(node.textContent)) raw.push(node.textContent.trim().slice(0, 80));
  }
  out.raw_tex = raw;
  out.page_width = document.documentElement.scrollWidth;
  // Output cells that cut their content off instead of letting the reader scroll to it.
  const clipped = [];
  for (const el of document.querySelectorAll('.cell_output, .cell_output *:not(img)')) {
    const style = getComputedStyle(el);
    if (['hidden', 'clip'].includes(style.overflowX) && el.scrollWidth > el.clientWidth + 1) {
      clipped.push(el.tagName.toLowerCase() + '.' + el.className + ': ' +
                   el.textContent.trim().slice(0, 60));
    }
  }
  out.clipped_outputs = clipped;
  // Code and text outputs wider than their box: readable only by scrolling sideways.
  out.wide_lines = Array.from(document.querySelectorAll('div.cell pre'))
    .filter(pre => pre.scrollWidth > pre.clientWidth + 1)
    .map(pre => (pre.closest('.cell_output') ? 'output: ' : 'code: ') +
         pre.textContent.split('\n').reduce((a, b) => (b.length > a.length ? b : a), '').trim()
           .slice(0, 100));
  return out;
}
"""


@pytest.mark.parametrize("page", PAGES or ["<no build>"])
def test_page_renders(page, server, browser):
    base = urlsplit(server)
    problems = []

    def is_local(url):
        parts = urlsplit(url)
        return parts.scheme in ("data", "blob", "about") or parts.netloc == base.netloc

    def route(r):
        if is_local(r.request.url):
            r.continue_()
        else:
            problems.append(f"request to another host (the book must render offline): {r.request.url}")
            r.abort()

    def on_response(response):
        if is_local(response.url) and response.status >= 400:
            problems.append(f"HTTP {response.status} for {response.url}")

    def on_failed(request):
        if is_local(request.url):
            problems.append(f"request failed ({request.failure}): {request.url}")

    context = browser.new_context(viewport=VIEWPORT, service_workers="block")
    try:
        context.route("**/*", route)
        tab = context.new_page()
        tab.on("console", lambda m: m.type == "error" and problems.append(f"console error: {m.text}"))
        tab.on("pageerror", lambda e: problems.append(f"script error: {e}"))
        tab.on("response", on_response)
        tab.on("requestfailed", on_failed)

        tab.goto(f"{server}/{page}", wait_until="load", timeout=PAGE_TIMEOUT_MS)
        redirect = re.search(r'http-equiv="refresh" content="\d+;\s*url=([^"]+)"',
                             (HTML / page).read_text(errors="replace"), re.IGNORECASE)
        if redirect:  # index.html sends the reader to the first page; check where it lands
            target = urlsplit(f"{server}/{page}")._replace(path=posixpath.normpath(
                posixpath.join(posixpath.dirname("/" + page), redirect.group(1)))).geturl()
            tab.wait_for_url(target, wait_until="load", timeout=PAGE_TIMEOUT_MS)
        # Images the browser defers until scrolled to load now; wait for every image, and for
        # MathJax's first typesetting pass on pages that load it.
        tab.evaluate(
            """async () => {
                 for (const img of document.images) img.loading = 'eager';
                 await Promise.all(Array.from(document.images).map(
                   img => img.complete ? null : new Promise(ok => { img.onload = img.onerror = ok; })));
                 if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
                   await MathJax.startup.promise;
                 }
               }""",
        )
        tab.wait_for_load_state("networkidle", timeout=PAGE_TIMEOUT_MS)
        found = tab.evaluate(INSPECT_JS)
        if found["n_math"] and not tab.evaluate("() => !!(window.MathJax && MathJax.startup)"):
            problems.append(f"MathJax did not load, and the page has {found['n_math']} formulas")
        shot = SCREENSHOTS / (re.sub(r"[/\\]", "__", page).removesuffix(".html") + ".png")
        # animations="disabled": finish the theme's transitions (its sidebars slide) before the shot
        tab.screenshot(path=str(shot), full_page=True, animations="disabled")
    finally:
        context.close()

    problems += [f"image did not load: {src}" for src in found["broken_images"]]
    if found["untypeset"]:
        problems.append(
            f"{len(found['untypeset'])} of {found['n_math']} formulas not typeset, e.g. "
            + "; ".join(found["untypeset"][:5])
        )
    problems += [f"TeX error in formula: {err}" for err in found["tex_errors"]]
    problems += [f"raw TeX left in the text: {text!r}" for text in found["raw_tex"]]
    problems += [f"output clipped instead of scrollable: {text}" for text in found["clipped_outputs"]]
    if found["page_width"] > VIEWPORT["width"]:
        problems.append(
            f"page is {found['page_width']} px wide in a {VIEWPORT['width']} px window "
            "(something does not fit and the whole page scrolls sideways)"
        )
    if found["wide_lines"]:
        # Not a failure (the box scrolls), but a reader has to scroll: say where.
        warnings.warn(
            f"{page}: {len(found['wide_lines'])} code/output blocks wider than the column at "
            f"{VIEWPORT['width']} px; longest lines:\n  " + "\n  ".join(found["wide_lines"]),
            stacklevel=1,
        )
    assert not problems, f"{page} (screenshot {shot}):\n  " + "\n  ".join(problems)
