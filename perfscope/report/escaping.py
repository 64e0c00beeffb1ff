"""Escaping for the two places where user-derived text meets code: plotly's pseudo-HTML and inline JSON.

    >>> plotly_text("<b>x</b> & y")
    '&lt;b&gt;x&lt;/b&gt; &amp; y'
    >>> print(script_json({"name": "</script>"}))
    {"name":"\u003c\u002fscript\u003e"}

Design notes: docs/report.md.
"""

from __future__ import annotations

import json
from typing import Any

_PLOTLY_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}

# Characters that can end or confuse an inline <script> (or a JS string, for U+2028/2029); JSON never
# uses them outside strings, so replacing them in the serialized text with \u escapes is lossless.
_SCRIPT_UNSAFE = {
    "<": "\\u003c",
    ">": "\\u003e",
    "&": "\\u0026",
    "/": "\\u002f",
    "\u2028": "\\u2028",
    "\u2029": "\\u2029",
}


def plotly_text(text: object) -> str:
    """Escape a user-derived string for any plotly text field (title, tick, hover, legend name)."""
    return "".join(_PLOTLY_ENTITIES.get(ch, ch) for ch in str(text))


def script_json(value: Any) -> str:
    """Serialize ``value`` to JSON that is safe to place verbatim inside a <script> element."""
    text = json.dumps(value, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
    return "".join(_SCRIPT_UNSAFE.get(ch, ch) for ch in text)


def safe_inline_js(source: str) -> str:
    """Guard a trusted JS bundle (plotly.js) against a literal "</script" that would end its element early.

    "<\\/" means "</" inside JS strings and regex literals, the only places such text can occur.
    """
    return source.replace("</script", "<\\/script").replace("</SCRIPT", "<\\/SCRIPT")
