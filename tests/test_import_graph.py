"""The import rules of docs/architecture.md, decided from the source: no module cycle, no package cycle, and the
readers of results (rules, report, check) never reach into how results are measured.

Every module under perfscope/ is parsed with `ast`; an edge is any `import` / `from ... import` of a perfscope
module, at the top level *and* inside functions (a function-level import is still a dependency: it only hides a
cycle from the import machinery, not from the design).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

import perfscope

ROOT = Path(perfscope.__file__).parent

PURE_HELPERS = (
    "perfscope.results",    # the typed results: what a stage hands the next
    "perfscope.stats",      # pure statistics shared with the sweep
    "perfscope.versions",   # the one version parser (a recorded run's torch version)
    "perfscope.tf32_api",   # which TF32 setter a code change shows (torch-free at import)
    "perfscope.snippets",   # the code changes a finding prints
    "perfscope.wording",    # the words of the messages a run records (knobs and rules quote a reason in theirs)
    "perfscope.precision",  # the precision names
    "perfscope.errors",     # exit codes and user errors
    "perfscope.registry",   # the registries' list type (knobs, rules, charts)
)
"""Below every stage: the typed results and helpers that import nothing of perfscope's but each other."""

KNOBS = "perfscope.knobs"
"""The vocabulary of optimizations, below the trial, the sweep and the readers: each asks the registry."""
KNOBS_MAY_IMPORT = (
    *PURE_HELPERS,
    "perfscope.workload",   # what a knob may look at (KnobContext.workload) and is applied to
    KNOBS,                  # each other (a knob's helpers, the base class, knobs/apply/)
)
"""Explicitly allowed for the knobs; never trial, measure, trace, search, hooks or a reader (how a knob is measured,
searched or ranked is not the knob's business), so that every one of them may import the knobs without a cycle."""

READERS = ("perfscope.rules", "perfscope.report", "perfscope.check")
"""The stages after results.json: they read typed results and never measure."""
READERS_MAY_IMPORT = (
    *PURE_HELPERS,
    "perfscope.ranking",    # the one ranking: reads typed results only
    "perfscope.cache_dir",  # the user's cache folder (a path, no measurement)
    KNOBS,                  # what each optimization is: words, addresses, code change; imports no measure/trial
    *READERS,               # each other (check renders through report, report runs the rules)
)
"""Explicitly allowed for READERS; everything else (trial, measure, trace, search, hooks, analyze, ...) is not."""


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _resolve(name: str) -> str | None:
    """The perfscope module ``name`` loads (a name imported from a module resolves to that module)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(module: str, source: str, *, is_package: bool = False) -> set[str]:
    """The perfscope modules ``module`` imports anywhere in ``source`` (top level, functions, TYPE_CHECKING)."""
    package = module if is_package else module.rpartition(".")[0]
    found: set[str | None] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(_resolve(a.name) for a in node.names if a.name.split(".")[0] == "perfscope")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "perfscope":
                continue
            for alias in node.names:  # `from perfscope.measure import memory` imports the module memory
                submodule = f"{target}.{alias.name}"
                found.add(submodule if submodule in MODULES else _resolve(target))
    found.discard(None)
    found.discard(module)
    return found  # type: ignore[return-value]


def import_graph() -> dict[str, set[str]]:
    return {m: imports_of(m, p.read_text(encoding="utf-8"), is_package=p.name == "__init__.py") for m, p in MODULES.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan, iterative: no recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _package(module: str) -> str:
    """perfscope.X for a module inside perfscope/X/ (or perfscope.X for a top-level module)."""
    return ".".join(module.split(".")[:2])


def _describe(component: list[str], graph: dict[str, set[str]]) -> str:
    members = set(component)
    return "; ".join(f"{a} -> {b}" for a in component for b in sorted(graph[a] & members))


# ---- the checker itself can fail ----------------------------------------------------------------------------------


def test_the_parser_sees_function_level_and_relative_imports() -> None:
    source = ("from perfscope.results import io\nimport perfscope.trial.launch\n"
              "def f():\n    from perfscope.trial.runner import TrialRunner\n    from . import child\n")
    assert imports_of("perfscope.trial.session", source) == {
        "perfscope.results.io", "perfscope.trial.launch", "perfscope.trial.runner", "perfscope.trial.child"}


def test_the_cycle_finder_finds_a_function_level_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


# ---- the rules ----------------------------------------------------------------------------------------------------


def test_no_module_imports_itself_back() -> None:
    graph = import_graph()
    found = cycles(graph)
    assert found == [], "import cycles: " + " | ".join(_describe(c, graph) for c in found)


def test_no_two_packages_import_each_other() -> None:
    """measure ↔ trace, trial ↔ search, ...: a package cycle is a layering error even when no module cycle exists."""
    graph = import_graph()
    packages: dict[str, set[str]] = defaultdict(set)
    edges: dict[tuple[str, str], list[str]] = defaultdict(list)
    for module, targets in graph.items():
        for target in targets:
            a, b = _package(module), _package(target)
            if a != b:
                packages[a].add(b)
                edges[(a, b)].append(f"{module} -> {target}")
    for a in list(packages):
        packages.setdefault(a, set())
    found = cycles(packages)
    detail = [f"{a} -> {b} ({', '.join(edges[(a, b)])})" for c in found for a in c for b in sorted(packages[a] & set(c))]
    assert found == [], "package cycles: " + "; ".join(detail)


@pytest.mark.parametrize("reader", READERS)
def test_readers_of_results_never_import_how_results_are_measured(reader: str) -> None:
    graph = import_graph()
    forbidden = sorted(f"{m} -> {t}" for m, targets in graph.items() if _within(m, (reader,))
                       for t in targets if not _within(t, READERS_MAY_IMPORT))
    assert forbidden == []


def _within(module: str, allowed: tuple[str, ...]) -> bool:
    return any(module == ok or module.startswith(ok + ".") for ok in allowed)


def test_knobs_import_only_what_sits_below_them() -> None:
    """trial -> knobs, search -> knobs and readers -> knobs stay one-way: a knob applies itself with knobs/apply/,
    never with a trial, measure or search module."""
    graph = import_graph()
    forbidden = sorted(f"{m} -> {t}" for m, targets in graph.items() if _within(m, (KNOBS,))
                       for t in targets if not _within(t, KNOBS_MAY_IMPORT))
    assert forbidden == []


def _top_level_imports(source: str) -> set[str]:
    """Modules imported by the module's own statements (not inside a function, class or TYPE_CHECKING block)."""
    found = set()
    for node in ast.parse(source).body:
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module)
    return found


def test_knob_modules_load_neither_torch_nor_their_torch_helpers() -> None:
    """A knob's hooks import torch (and knobs/apply/, which imports it at load) inside themselves: the analyze
    process and the readers load the registry for its words, never the helpers a trial applies knobs with."""
    loaded = {name: sorted(t for t in _top_level_imports(path.read_text(encoding="utf-8"))
                           if t.split(".")[0] == "torch" or _within(t, (f"{KNOBS}.apply",)))
              for name, path in MODULES.items() if _within(name, (KNOBS,)) and not _within(name, (f"{KNOBS}.apply",))}
    assert {name: found for name, found in loaded.items() if found} == {}
    assert f"{KNOBS}.base" in loaded  # the rule saw the knobs

