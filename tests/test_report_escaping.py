"""User-derived names (workload, trial, kernel, file) must render as text everywhere: page, charts, JSON, Markdown."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser

from perfscope.report import render_html, render_markdown
from perfscope.report.escaping import plotly_text, safe_inline_js, script_json
from perfscope.report.html import plotly_js
from perfscope.report.markdown import code, md
from tests.factories import make_full_results

WORKLOAD = "<script>alert(1)</script>"
KERNEL = "</script><b>x"
PREFIX = "<img src=x onerror=alert(2)>"


def hostile_results():
    results = make_full_results(workload_name=WORKLOAD, kernel_name=KERNEL, trial_prefix=PREFIX)
    results.environment.device_name = "GPU <svg onload=alert(3)>"
    results.findings[0].reference = "javascript:alert(4)"
    results.findings[0].evidence.append("</pre><script>alert(5)</script>")
    results.trials[4].error = "</details><iframe src=javascript:alert(6)>"
    return results


class _Markup(HTMLParser):
    """Collects the tags and the raw <script> bodies the browser would see."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.scripts: list[str] = []
        self.text: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        self._in_script = tag == "script"
        if self._in_script:
            self.scripts.append("")

    def handle_endtag(self, tag):
        if tag == "script":
            self._in_script = False

    def handle_data(self, data):
        if self._in_script:
            self.scripts[-1] += data
        else:
            self.text.append(data)


def _parse(html: str) -> _Markup:
    parser = _Markup()
    parser.feed(html)
    return parser


# ------------------------------------------------------------------------------------- primitives


def test_plotly_text_escapes_its_html_subset():
    assert plotly_text("<b>x</b> & <a href='javascript:1'>") == "&lt;b&gt;x&lt;/b&gt; &amp; &lt;a href='javascript:1'&gt;"
    assert plotly_text("plain_name-1") == "plain_name-1"


def test_script_json_cannot_close_the_script_and_round_trips():
    value = {"k": "</script><!-- \u2028 \u2029 & <b>", "n": [1, 2.5, None]}
    text = script_json(value)
    assert not set(text) & {"<", ">", "&", "/", "\u2028", "\u2029"}
    assert json.loads(text) == value


def test_plotly_bundle_has_no_closing_script_tag():
    assert "</script" not in plotly_js().lower()
    assert safe_inline_js('x="</script>"') == 'x="<\\/script>"'


def test_markdown_escapes_markup_and_table_pipes():
    assert md("<script>a|b</script>") == "\\<script\\>a\\|b\\</script\\>"
    assert code("a`b", in_table=True) == "`` a`b ``"
    assert code("x|y", in_table=True) == "`x\\|y`"


# ------------------------------------------------------------------------------------------ pages


def test_hostile_names_are_text_in_the_page():
    html = render_html(hostile_results())
    page = _parse(html)
    assert len(page.scripts) == 3  # plotly.js, chart JSON, bootstrap: nothing injected
    tags = {tag for tag, _ in page.tags}
    assert not tags & {"img", "svg", "iframe"}
    assert not any(k.startswith("on") for _, attrs in page.tags for k in attrs)
    assert not any((attrs.get("href") or "").lower().startswith("javascript:") for _, attrs in page.tags)
    assert "<b>x" not in html and "alert(1)</script>" not in html
    text = "".join(page.text)
    for name in (WORKLOAD, KERNEL, "</pre><script>alert(5)</script>", "GPU <svg onload=alert(3)>"):
        assert name in text  # shown to the reader, as text
    assert html.count("<b>") == html.count("</b>")  # only the template's own bold labels


def test_hostile_names_are_inert_in_chart_json():
    html = render_html(hostile_results())
    page = _parse(html)
    blob = page.scripts[1]
    assert not re.search(r"[<>&]", blob)
    specs = json.loads(blob)

    strings: list[str] = []

    def walk(node):
        if isinstance(node, str):
            strings.append(node)
        elif isinstance(node, dict):
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(specs)
    allowed = re.compile(r"</?(br|extra|b)>")  # the only pseudo-HTML perfscope itself writes into figures
    for s in strings:
        assert "<" not in allowed.sub("", s), s
    assert plotly_text(PREFIX + "baseline") in strings  # trial names reach ticks escaped
    assert any(plotly_text("<img") in s for s in strings)


def test_hostile_names_in_markdown():
    text = render_markdown(hostile_results())
    assert "# perfscope report: \\<script\\>alert(1)\\</script\\>" in text
    prose = re.sub(r"^ *(`{3,}).*?^ *\1$", "", text, flags=re.S | re.M)  # fenced blocks are literal text
    prose = re.sub(r"(`+).*?\1", "", prose)  # so are code spans
    assert not re.search(r"(?<!\\)<", prose), "an unescaped '<' would be HTML on GitHub"
