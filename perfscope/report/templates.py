"""Finding and loading the Jinja2 templates, from an installed wheel or a source checkout.

    >>> env = template_environment()
    >>> env.get_template("base.html.j2")

Design notes: docs/report.md.
"""

from __future__ import annotations

import functools
import importlib.resources
from importlib.resources.abc import Traversable
from pathlib import Path

import jinja2

from perfscope.cache_dir import cache_dir

TEMPLATE_PACKAGE = "perfscope._templates"
SOURCE_TEMPLATES = Path(__file__).resolve().parents[2] / "reports" / "templates"


def template_root() -> Traversable:
    """``<repo>/reports/templates`` beside this source tree when there is one, else the installed package.

    The checkout's own folder first: a package ``perfscope._templates`` mapped by an editable install of
    another checkout (a git worktree beside the main one) must not render this tree's views.
    """
    if (SOURCE_TEMPLATES / "base.html.j2").is_file():
        return SOURCE_TEMPLATES
    try:
        root = importlib.resources.files(TEMPLATE_PACKAGE)
        if root.joinpath("base.html.j2").is_file():
            return root
    except ModuleNotFoundError:
        pass
    raise FileNotFoundError(f"perfscope report templates not found (package {TEMPLATE_PACKAGE} or {SOURCE_TEMPLATES})")


def _loader(root: Traversable) -> jinja2.BaseLoader:
    # A Traversable may live inside a zip, so read through it rather than assume a directory on disk.
    def load(name: str) -> str | None:
        node = root.joinpath(*name.split("/"))
        return node.read_text(encoding="utf-8") if node.is_file() else None

    return jinja2.FunctionLoader(load)


def _bytecode_cache() -> jinja2.BytecodeCache | None:
    folder = cache_dir() / "templates"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return jinja2.FileSystemBytecodeCache(str(folder))  # written atomically (temp file + rename) by Jinja2


@functools.cache
def template_environment() -> jinja2.Environment:
    """Autoescaping on for everything: all template text is HTML (the Markdown is built in Python)."""
    return jinja2.Environment(
        loader=_loader(template_root()),
        bytecode_cache=_bytecode_cache(),
        autoescape=True,
        undefined=jinja2.StrictUndefined,  # a misspelt field is an error, not a silently empty cell
        trim_blocks=True,
        lstrip_blocks=True,
    )
