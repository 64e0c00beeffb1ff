"""The house stays readable: no module of perfscope/ grows past the cap a reader can hold in mind (issue 36)."""

from __future__ import annotations

from pathlib import Path

import pytest

import perfscope

ROOT = Path(perfscope.__file__).parent
CAP = 500
"""Lines per module; a module that needs more holds two concepts: split it where they part."""


@pytest.mark.parametrize("path", sorted(ROOT.rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_is_longer_than_the_cap(path: Path) -> None:
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= CAP, f"{path.relative_to(ROOT.parent)} has {lines} lines (cap {CAP}): split it where its concepts part"
