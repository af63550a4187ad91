"""The scripts each page loads: MathJax from the book itself, each inline script once.

1. Jupyter Book 1.x adds every ``*.js`` file under ``_static/`` to ``html_js_files``, so each page
   would load the MathJax copy in ``_static/mathjax`` twice and every TeX extension eagerly (before
   MathJax itself, which fails). MathJax is loaded once, through ``mathjax_path``, and fetches its
   TeX extensions itself when a formula needs them. This removes the copy's files from
   ``html_js_files`` and checks that ``mathjax_path`` names a file of that copy, so that formulas
   typeset without a network connection.
2. sphinx-thebe 0.3.1 registers an inline script (``const THEBE_JS_URL = ...``) with
   ``app.add_js_file(None, body=...)`` after the HTML builder started; Sphinx 7.4 then lists it
   twice (once as filename ``None``, once as ``''``), and the second copy throws "Identifier
   'THEBE_JS_URL' has already been declared" on every page. Pages list each inline script once.
"""

from pathlib import Path

from sphinx.errors import ConfigError

VENDOR_DIR = "mathjax/"


def _drop_vendored_scripts(app, config):
    def path_of(entry):
        return entry[0] if isinstance(entry, (tuple, list)) else entry

    config.html_js_files = [
        entry for entry in config.html_js_files if not str(path_of(entry)).startswith(VENDOR_DIR)
    ]
    if not str(config.mathjax_path).startswith(VENDOR_DIR):
        raise ConfigError(
            f"mathjax_path={config.mathjax_path!r}: expected the copy served with the book, "
            f"'{VENDOR_DIR}tex-mml-chtml.js' (relative to _static/), so that math typesets offline"
        )
    script = Path(app.confdir, "_static", config.mathjax_path)
    if not script.is_file():
        raise ConfigError(
            f"mathjax_path={config.mathjax_path!r}: {script} does not exist; "
            "see _static/mathjax/README.md for how to restore the MathJax copy"
        )


def _inline_scripts_once(app, pagename, templatename, context, doctree):
    scripts, seen = [], set()
    for script in context.get("script_files", []):
        filename = getattr(script, "filename", script) or ""
        attributes = getattr(script, "attributes", {})
        key = (str(filename), tuple(sorted(attributes.items())))
        if not filename and key in seen:
            continue
        seen.add(key)
        scripts.append(script)
    context["script_files"] = scripts


def setup(app):
    app.connect("config-inited", _drop_vendored_scripts)
    app.connect("html-page-context", _inline_scripts_once)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
