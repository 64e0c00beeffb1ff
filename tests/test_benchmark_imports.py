"""The benchmark scripts are not run by the suite (they measure for minutes), so a refactor could leave one
importing a name that moved: every `from perfscope... import name` / `from benchmarks... import name` in them
must resolve. Decided by `ast` and importlib, without running the scripts."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _imports(path: Path) -> list[tuple[str, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [(node.module, alias.name) for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
            and node.module.split(".")[0] in ("perfscope", "benchmarks") for alias in node.names]


@pytest.mark.parametrize("script", sorted(BENCHMARKS.glob("*.py")), ids=lambda p: p.name)
def test_every_name_a_benchmark_imports_from_the_project_exists(script: Path) -> None:
    missing = []
    for module, name in _imports(script):
        try:
            found = importlib.import_module(module)
        except ImportError as exc:
            missing.append(f"{module}: {exc}")
            continue
        if not hasattr(found, name):
            try:
                importlib.import_module(f"{module}.{name}")
            except ImportError:
                missing.append(f"{module}.{name}")
    assert not missing, f"{script.name} imports what no longer exists: {missing}"
