"""The one version parser every feature gate uses (perfscope.versions)."""

from __future__ import annotations

import pytest

from perfscope.versions import at_least, major_minor


@pytest.mark.parametrize(("version", "expected"), [
    ("2.13.0+cpu", (2, 13)),        # a two-digit minor: a lexical comparison would put it before 2.9
    ("2.6.0a0+git123", (2, 6)),     # a nightly (pre-release + local label)
    ("2.5.1+cu124", (2, 5)),        # a CUDA build's local label
    ("2.9.0", (2, 9)),
    ("2.10.0.dev20250101", (2, 10)),
    ("0.10.1", (0, 10)),            # a package version (torchao)
    ("v2.4.0", (2, 4)),
    (None, None),
    ("", None),
    ("unknown", None),
    ("2", None),
])
def test_major_minor(version, expected) -> None:
    assert major_minor(version) == expected


@pytest.mark.parametrize(("version", "wanted", "expected"), [
    ("2.13.0+cpu", (2, 9), True),
    ("2.9.0", (2, 9), True),
    ("2.8.1+cu121", (2, 9), False),
    ("2.6.0a0+git123", (2, 5), True),
    ("2.5.1+cu124", (2, 5), True),
    ("2.5.1+cu124", (2, 6), False),
    ("3.0.0", (2, 13), True),
    (None, (2, 9), None),
    ("n/a", (2, 9), None),
])
def test_at_least(version, wanted, expected) -> None:
    assert at_least(version, wanted) is expected


def test_every_gate_uses_the_one_parser() -> None:
    """No module under perfscope/ parses a version with its own regex again (the three copies this replaced)."""
    import re
    from pathlib import Path

    import perfscope

    root = Path(perfscope.__file__).parent
    own = re.compile(r're\.(match|search)\(r"\(\\d\+\)\\\.\(\\d\+\)')
    offenders = [str(p.relative_to(root)) for p in root.rglob("*.py")
                 if p.name != "versions.py" and own.search(p.read_text(encoding="utf-8"))]
    assert offenders == []
