"""perfscope: measure which fixes make your PyTorch training faster, on your own hardware, ranked.

    perfscope analyze examples/tiny_transformer.py      # a workload file -> results.json + report.html

Design notes: docs/internals.md."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from perfscope._version import __version__

if TYPE_CHECKING:
    from perfscope.hooks import Profiler
    from perfscope.workload import Workload

# Loaded on first use (PEP 562): both import torch, which the commands that only read files must not pay for.
_LAZY = {"Profiler": "perfscope.hooks", "Workload": "perfscope.workload"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'perfscope' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later look-ups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])


__all__ = ["Profiler", "Workload", "__version__"]
