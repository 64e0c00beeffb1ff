"""Compiled report templates are cached in perfscope's cache folder; an edited template is compiled again."""

from __future__ import annotations

from perfscope.cache_dir import DIR_ENV


def test_compiled_templates_are_cached_and_an_edited_template_is_compiled_again(tmp_path, monkeypatch):
    import jinja2

    from perfscope.report import html

    monkeypatch.setenv(DIR_ENV, str(tmp_path))
    cache = html._bytecode_cache()
    sources = {"page.j2": "v1 {{ x }}"}
    env = jinja2.Environment(loader=jinja2.FunctionLoader(sources.get), bytecode_cache=cache)
    assert env.get_template("page.j2").render(x=1) == "v1 1"
    assert len(list((tmp_path / "templates").iterdir())) == 1
    sources["page.j2"] = "v2 {{ x }}"
    fresh = jinja2.Environment(loader=jinja2.FunctionLoader(sources.get), bytecode_cache=cache)
    assert fresh.get_template("page.j2").render(x=2) == "v2 2"


def test_no_template_cache_when_its_folder_cannot_be_made(tmp_path, monkeypatch):
    from perfscope.report import html

    (tmp_path / "file").write_text("")
    monkeypatch.setenv(DIR_ENV, str(tmp_path / "file"))
    assert html._bytecode_cache() is None
