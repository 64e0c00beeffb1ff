"""Imports of perfscope's own modules sit at the top of a module, where a reader sees the dependency graph; an
import inside a function needs a reason, listed here with its count (issue 36). Decided by `ast`, so free."""

from __future__ import annotations

import ast
from pathlib import Path

import perfscope

ROOT = Path(perfscope.__file__).parent

ALLOWED: dict[str, tuple[int, str]] = {
    "cli.py": (29, "each command loads its own stack: `perfscope trace/report/check` start without torch"),
    "cli_parser.py": (1, "the parser is built at every start; the structure gates' parser only when given"),
    "knobs/channels_last.py": (1, "knobs are torch-free at import (the readers import them); knobs/apply/ is torch"),
    "knobs/checkpointing.py": (1, "as above"),
    "trial/child.py": (8, "the trial pins its lane's cores before torch loads (its thread pools size at import)"),
    "trial/loop.py": (1, "a profiler that fails to import costs the trace, not the run (ImportError guard)"),
    "trial/zygote.py": (5, "the zygote preloads the trial modules, then forks; the fork imports the child"),
    "hooks/profiler.py": (4, "a disabled Profiler imports nothing heavy (test_disabled_profiler_imports_nothing_heavy)"),
    "hooks/stepping.py": (2, "as above: the Profiler's step machine, split from it"),
    "hooks/flopstep.py": (3, "as above: the Profiler imports it at start; its FLOP count needs the results model"),
    "hooks/clocks.py": (2, "NVML and its throttle names load only where a GPU's clock is read; the sampler's only once started"),
    "hooks/watch.py": (2, "the trace readers load only once a capture is compared"),
    "hooks/framework.py": (1, "as above: describe() checks its settings against the results model's TrialConfig"),
    "hooks/capture.py": (3, "as above"),
    "measure/lazy_msg.py": (2, "msg() and words() for the modules a disabled Profiler imports: the results model loads at the first message"),
    "lanes/sweep.py": (2, "ray and slurm are optional extras, imported only when chosen"),
    "live/client.py": (3, "`perfscope capture` starts without torch; the trace readers load once a trace came back"),
    "hooks/loggers.py": (1, "owned by the loggers' work in flight (issue 36 left it alone)"),
}
"""Per module (relative to perfscope/): how many function-local imports of perfscope modules, and why."""


def _of_perfscope(node: ast.AST) -> bool:
    if isinstance(node, ast.ImportFrom):
        return node.level > 0 or (node.module or "").startswith("perfscope")
    return isinstance(node, ast.Import) and any(a.name.startswith("perfscope") for a in node.names)


def _local_imports(path: Path) -> int:
    """Imports of perfscope modules inside a function (nested functions counted once)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    functions = [fn for fn in ast.walk(tree) if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef)]
    return len({id(node) for fn in functions for node in ast.walk(fn) if _of_perfscope(node)})


def test_function_local_imports_of_perfscope_stay_within_their_budget() -> None:
    counts = {str(p.relative_to(ROOT)): n for p in sorted(ROOT.rglob("*.py")) if (n := _local_imports(p))}
    over = {m: n for m, n in counts.items() if n > ALLOWED.get(m, (0, ""))[0]}
    assert not over, f"function-local perfscope imports beyond the budget (move them to the module's top): {over}"
    stale = {m: (n, counts.get(m, 0)) for m, (n, _) in ALLOWED.items() if counts.get(m, 0) < n}
    assert not stale, f"fewer local imports than budgeted: lower ALLOWED to match {stale}"
    assert sum(counts.values()) <= sum(n for n, _ in ALLOWED.values())
