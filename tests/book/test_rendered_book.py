"""The rendered book, as a reader's browser shows it.

Opens every page of ``_build/html`` (from ``jupyter-book build .``) in headless Chromium, served
from a local HTTP server, and fails on what a reader would hit: a console error or uncaught script
error, a request for one of the book's own files that fails, an image that does not load, a formula
that MathJax did not typeset (or typeset as an error), raw TeX left in the text, a page wider than
the window, a code cell or output that runs out of its box without a scroll bar (cut off, or
spilling over), a table wider than the text column, raw Markdown (backticks, ``**``, a table's
``|---|`` row, ``[text](url)``) printed in a cell output or a glued value, or a figure whose smallest text is
under 8 pixels high at the width the page shows it (the PNG records the height of its smallest text in image
pixels, :func:`lrp_lib.book.plotting.png_with_text_size`; the page scales it by the shown width over the
image's own). Every request to another
host is refused, so a page that needs the network to render fails here too.

The checks run in the page (``INSPECT_JS``) and are turned into messages by :func:`problems_of`;
``test_check_catches`` feeds both a small page made to break each rule, in the same Chromium, so
each check is shown to fail when it should (and ``test_checks_pass_a_clean_page`` that they do not
fire on a page that breaks none). Those two need Chromium and Playwright but no book build.

Each page's full-page screenshot goes to ``_build/screenshots/`` for a human to look at, and one at
a phone's width (390 px) to ``_build/screenshots/phone/``; at that width the page must not be wider
than the window and nothing may be cut off or spill out of its box (``test_page_reads_on_a_phone``).

Needs Debian's ``chromium`` (``/usr/bin/chromium``, or ``LRP_BOOK_CHROMIUM``) and the ``playwright``
package, which only drives that binary (no browser download). Without a build the tests skip, unless
``LRP_BOOK_REQUIRE_BUILD=1`` (as ``.ci/browser`` sets): then a missing build, browser or driver fails.
``LRP_BOOK_HTML`` points the test at another build folder.
"""
import base64
import functools
import io
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

from lrp_lib.book.plotting import TEXT_SIZE_KEY

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
# A phone's (an iPhone 12 to 15 held upright): the page must not scroll sideways as a whole, and
# nothing may be cut off; wide code, outputs and tables scroll inside their own boxes.
PHONE = {"width": 390, "height": 844}
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
def chromium():
    """Headless Chromium, driven by Playwright (no book build needed)."""
    if not Path(CHROMIUM).is_file():
        unavailable(f"no Chromium at {CHROMIUM}: `apt-get install chromium` (or set LRP_BOOK_CHROMIUM)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("the `playwright` package is not installed (pip install -r requirements.txt)")
    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture(scope="module")
def browser(chromium):
    """The same Chromium, for the pages of the build (screenshots start afresh)."""
    if not PAGES:
        unavailable(f"no book build at {HTML}: run `jupyter-book build .` first")
    shutil.rmtree(SCREENSHOTS, ignore_errors=True)
    SCREENSHOTS.mkdir(parents=True)
    return chromium


def test_book_was_built():
    if not PAGES:
        unavailable(f"no book build at {HTML}: run `jupyter-book build .` first")
    missing = [page for page in toc_pages() if page not in PAGES]
    assert not missing, f"pages in _toc.yml that the build did not write: {missing}"


# Runs in the page once MathJax has finished: what a reader would see go wrong.
INSPECT_JS = r"""
async () => {
  const out = {};
  // The text width of the column an element sits in.
  const column = el => {
    const box = el.closest('article, .bd-article, main, body');
    const style = getComputedStyle(box);
    return box.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
  };
  // A PNG's text fields (its tEXt chunks), by keyword; null for an image that is not a PNG.
  const pngText = bytes => {
    if (String.fromCharCode(...bytes.subarray(1, 4)) !== 'PNG') return null;
    const found = {}, view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    for (let at = 8; at + 8 <= bytes.length;) {
      const length = view.getUint32(at), type = String.fromCharCode(...bytes.subarray(at + 4, at + 8));
      if (type === 'tEXt') {
        const data = bytes.subarray(at + 8, at + 8 + length), zero = data.indexOf(0);
        found[String.fromCharCode(...data.subarray(0, zero))] = String.fromCharCode(...data.subarray(zero + 1));
      }
      if (type === 'IEND') break;
      at += 12 + length;
    }
    return found;
  };
  // Figures in cell outputs: the height of their smallest text, as the PNG records it
  // (lrp_lib.book.plotting.book_style), and the width the page shows them at (a folded output:
  // the width it would have unfolded).
  out.figures = [];
  for (const img of document.querySelectorAll('.cell_output img')) {
    let fields = null;
    try {
      fields = pngText(new Uint8Array(await (await fetch(img.currentSrc || img.src)).arrayBuffer()));
    } catch (e) {}
    const size = fields && fields[TEXT_SIZE_KEY];
    out.figures.push({
      src: (img.getAttribute('src') || '').slice(0, 60),
      natural: img.naturalWidth,
      shown: img.getBoundingClientRect().width || Math.min(img.naturalWidth, column(img)),
      smallest: size === undefined || size === null ? null : parseFloat(size),
    });
  }
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
  const describe = el => (el.closest('.cell_output') ? 'output ' : 'code ') +
    el.tagName.toLowerCase() + (el.className ? '.' + String(el.className).split(' ')[0] : '') +
    ': ' + el.textContent.trim().split('\n')[0].slice(0, 60);
  // Code and output boxes whose content is wider than the box, where the box does not scroll:
  // cut off (overflow hidden or clip) or spilling over its edge (overflow visible).
  const clipped = [], spilled = [];
  for (const el of document.querySelectorAll('div.cell, div.cell *:not(img)')) {
    if (!el.clientWidth || el.scrollWidth <= el.clientWidth + 1) continue;
    const overflow = getComputedStyle(el).overflowX;
    if (['hidden', 'clip'].includes(overflow)) clipped.push(describe(el));
    else if (overflow === 'visible') spilled.push(describe(el));
  }
  out.clipped_outputs = clipped;
  out.spilled_outputs = spilled;
  // Tables wider than the text column (they scroll inside their container, or widen the page).
  out.wide_tables = Array.from(document.querySelectorAll('table'))
    .filter(t => t.offsetParent !== null)
    .map(t => [t, Math.round(t.getBoundingClientRect().width), Math.round(column(t))])
    .filter(([t, width, room]) => width > room + 1)
    .map(([t, width, room]) => `${width} px in a ${room} px column: ` +
         (t.querySelector('tr') || t).textContent.trim().replace(/\s+/g, ' ').slice(0, 60));
  // Markdown printed as text: inline code in single backticks, **bold**, a table's |---| row,
  // [text](url). reST's ``literals`` and :roles:`x` (printed Python source) do not count.
  const markdown = /(?<![`:\w])`[^`\n]+`(?![`\w])|\*\*[^\s*][^*\n]*?[^\s*]\*\*|^\s*\|?\s*:?-{3,}:?\s*\|[-:|\s]*$|\[[^\]\n]+\]\((?:https?:\/\/|[\w.\/#-]+)[^)\s]*\)/m;
  out.raw_markdown = Array.from(document.querySelectorAll('.cell_output, .pasted-text'))
    .map(el => [el, el.textContent.match(markdown)])
    .filter(([el, m]) => m)
    .map(([el, m]) => `${JSON.stringify(m[0].slice(0, 60))} in ` +
         (el.classList.contains('pasted-text') ? 'a glued value' : 'a cell output'));
  // Code and text outputs wider than their box: readable only by scrolling sideways.
  out.wide_lines = Array.from(document.querySelectorAll('div.cell pre'))
    .filter(pre => pre.scrollWidth > pre.clientWidth + 1)
    .map(pre => (pre.closest('.cell_output') ? 'output: ' : 'code: ') +
         pre.textContent.split('\n').reduce((a, b) => (b.length > a.length ? b : a), '').trim()
           .slice(0, 100));
  return out;
}
""".replace("TEXT_SIZE_KEY", repr(TEXT_SIZE_KEY))
# The smallest text a figure may show, in CSS pixels at the width the page shows it.
MIN_TEXT_PX = 8


def problems_of(found, window_width):
    """What INSPECT_JS found on a page, as one message per problem (none: the page reads well)."""
    problems = [f"image did not load: {src}" for src in found["broken_images"]]
    if found["untypeset"]:
        problems.append(
            f"{len(found['untypeset'])} of {found['n_math']} formulas not typeset, e.g. "
            + "; ".join(found["untypeset"][:5])
        )
    problems += [f"TeX error in formula: {err}" for err in found["tex_errors"]]
    problems += [f"raw TeX left in the text: {text!r}" for text in found["raw_tex"]]
    problems += [f"cut off instead of scrollable: {text}" for text in found["clipped_outputs"]]
    problems += [f"spills out of its box instead of scrolling: {text}"
                 for text in found["spilled_outputs"]]
    problems += [f"table wider than the text column, {text}" for text in found["wide_tables"]]
    problems += [f"raw Markdown printed as text: {text}" for text in found["raw_markdown"]]
    for fig in found["figures"]:
        if fig["smallest"] is None:
            problems.append(f"figure without a recorded text size (draw it after lrp_lib.book.plotting.book_style()): "
                            f"{fig['src']}")
        elif fig["natural"] and fig["smallest"] * fig["shown"] / fig["natural"] < MIN_TEXT_PX:
            problems.append(
                f"figure text {fig['smallest'] * fig['shown'] / fig['natural']:.1f} px high at the "
                f"{fig['shown']:.0f} px the page shows it (under {MIN_TEXT_PX} px; {fig['smallest']:.1f} px in the "
                f"{fig['natural']} px image): {fig['src']}")
    if found["page_width"] > window_width:
        problems.append(
            f"page is {found['page_width']} px wide in a {window_width} px window "
            "(something does not fit and the whole page scrolls sideways)"
        )
    return problems


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

    problems += problems_of(found, VIEWPORT["width"])
    if found["wide_lines"]:
        # Not a failure (the box scrolls), but a reader has to scroll: say where.
        warnings.warn(
            f"{page}: {len(found['wide_lines'])} code/output blocks wider than the column at "
            f"{VIEWPORT['width']} px; longest lines:\n  " + "\n  ".join(found["wide_lines"]),
            stacklevel=1,
        )
    assert not problems, f"{page} (screenshot {shot}):\n  " + "\n  ".join(problems)


@pytest.mark.parametrize("page", PAGES or ["<no build>"])
def test_page_reads_on_a_phone(page, server, browser):
    """At 390 px: no sideways scrolling of the whole page, nothing cut off or spilling over.

    Code, outputs and tables wider than the screen are expected here; they must scroll in their own
    boxes, which the checks of the laptop width (run on the same page) do not need to repeat."""
    context = browser.new_context(viewport=PHONE, service_workers="block", is_mobile=True,
                                  has_touch=True, device_scale_factor=2)
    try:
        context.route("**/*", lambda r: r.continue_() if urlsplit(r.request.url).netloc
                      == urlsplit(server).netloc else r.abort())
        tab = context.new_page()
        tab.goto(f"{server}/{page}", wait_until="load", timeout=PAGE_TIMEOUT_MS)
        tab.wait_for_load_state("networkidle", timeout=PAGE_TIMEOUT_MS)
        found = tab.evaluate(INSPECT_JS)
        shot = SCREENSHOTS / "phone" / (re.sub(r"[/\\]", "__", page).removesuffix(".html") + ".png")
        shot.parent.mkdir(exist_ok=True)
        tab.screenshot(path=str(shot), full_page=True, animations="disabled", scale="css")
    finally:
        context.close()
    problems = [p for p in problems_of(found, PHONE["width"])
                if p.startswith(("cut off", "spills out", "page is"))]
    assert not problems, f"{page} at {PHONE['width']} px (screenshot {shot}):\n  " + "\n  ".join(problems)


# ---------------------------------------------------------------- the checks, on made-up pages
LONG = "explainer = Explainer(model, algorithm=LRPExplainer(), " + "x" * 150


def made_up_page(body):
    """A page with the book's structure: a 600 px text column holding ``body``."""
    return (
        "<!doctype html><html><head><meta charset='utf-8'></head><body style='margin:0'>"
        "<article class='bd-article' style='width:600px; padding:0 12px; font: 14px sans-serif'>"
        f"{body}</article></body></html>"
    )


def cell(code="x = 1", output="", pre_style="overflow-x: auto"):
    out = f"<div class='cell_output'>{output}</div>" if output else ""
    return (f"<div class='cell'><div class='cell_input'><pre style='{pre_style}'>{code}</pre></div>"
            f"{out}</div>")


def figure(width, smallest=None):
    """A figure as a cell output shows it: a PNG ``width`` pixels wide (the book's CSS: at most the column's
    width), recording ``smallest`` as the height of its smallest text (None: no record)."""
    from PIL import Image, PngImagePlugin
    info = PngImagePlugin.PngInfo()
    if smallest is not None:
        info.add_text(TEXT_SIZE_KEY, f"{smallest:.2f}")
    buffer = io.BytesIO()
    Image.new("RGB", (width, 40), "white").save(buffer, format="png", pnginfo=info)
    data = base64.b64encode(buffer.getvalue()).decode()
    return f"<img src='data:image/png;base64,{data}' style='max-width: 100%'>"


# Breaks none of the rules, with what must not be mistaken for a problem: a long line in a box
# that scrolls, a table that fits, printed Python source (reST ``literals``, :roles:`x`, x ** 2),
# rendered Markdown (<code>, <strong>) and a plain glued number.
CLEAN = made_up_page(
    cell(LONG, "<pre style='overflow-x: auto'>" + LONG + "</pre>")
    + cell("print(inspect.getsource(GCN))",
           "<pre>class GCN(nn.Module):\n    \"\"\"Four ``GCNConv`` layers, see :mod:`lrp_lib`.\"\"\"\n"
           "    def forward(self, x, **kwargs):\n        return x ** 2 + x ** 3  # [0, 1]</pre>")
    + cell("display(Markdown(note))",
           "<p>Measured by <code>python bench.py</code>, <strong>median</strong> of 3.</p>"
           "<div style='overflow-x: auto'><table><tr><th>measure</th><th>ratio</th></tr>"
           "<tr><td>forward | backward</td><td>|R| / max |R|</td></tr></table></div>")
    + "<p>The ratio is <span class='pasted-text'>0.44</span>.</p>"
    + cell("plt.show()", figure(500, smallest=9.0))  # shown at its own size: 9 px
    + cell("plt.show()", figure(1200, smallest=18.0))  # shown at 600 px: 9 px
)

BROKEN = {
    "code cut off": (cell(LONG, pre_style="overflow-x: hidden"), "cut off instead of scrollable"),
    "output cut off": (cell(output="<pre style='overflow-x: clip'>" + LONG + "</pre>"),
                       "cut off instead of scrollable"),
    "code spilling": (cell(LONG, pre_style="overflow-x: visible"),
                      "spills out of its box instead of scrolling"),
    "wide table": (
        "<div style='overflow-x: auto'><table><tr>"
        + "".join(f"<td style='white-space: nowrap'>column number {i}</td>" for i in range(12))
        + "</tr></table></div>",
        "table wider than the text column",
    ),
    "backticks printed": (cell(output="<pre>Measured on 2026-11-23 by `python bench.py`: 2 cores</pre>"),
                          "raw Markdown printed as text"),
    "bold printed": (cell(output="<pre>**Mutagenicity** (test accuracy 0.81)</pre>"),
                     "raw Markdown printed as text"),
    "table printed": (cell(output="<pre>| measure | ratio |\n| --- | ---: |\n| forward | 0.44 |</pre>"),
                      "raw Markdown printed as text"),
    "link printed": (cell(output="<pre>see [the benchmark](performance.ipynb)</pre>"),
                     "raw Markdown printed as text"),
    "figure text too small": (cell("plt.show()", figure(1200, smallest=13.75)),  # 6.9 px at 600 px
                              "figure text 6.9 px high at the 600 px the page shows it"),
    "figure text size not recorded": (cell("plt.show()", figure(300)), "figure without a recorded text size"),
    "glued bold": ("<p>It is <span class='pasted-text'>**0.44**</span>.</p>", "raw Markdown printed"),
}


def problems_on(chromium, html, viewport=VIEWPORT):
    context = chromium.new_context(viewport=viewport)
    try:
        tab = context.new_page()
        tab.set_content(html)
        return problems_of(tab.evaluate(INSPECT_JS), viewport["width"])
    finally:
        context.close()


def test_checks_pass_a_clean_page(chromium):
    assert problems_on(chromium, CLEAN) == []


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_check_catches(chromium, case):
    body, expected = BROKEN[case]
    problems = problems_on(chromium, made_up_page(body))
    assert any(expected in p for p in problems), f"{case}: expected {expected!r}, got {problems}"


def test_phone_check_catches_a_page_wider_than_the_window(chromium):
    # the made-up page's 600 px column fits a laptop's window, not a phone's
    assert not any(p.startswith("page is") for p in problems_on(chromium, CLEAN))
    problems = problems_on(chromium, CLEAN, PHONE)
    assert any(p.startswith(f"page is") and f"in a {PHONE['width']} px window" in p for p in problems), problems
