"""Profiling hooks for a training loop you already have (`perfscope.Profiler`), and framework adapters.

    prof = perfscope.Profiler(model, optimizer=opt, device="cuda")
"""

from perfscope.hooks.profiler import DISABLE_ENV, Profiler, disabled_by_env

__all__ = ["DISABLE_ENV", "Profiler", "disabled_by_env"]
