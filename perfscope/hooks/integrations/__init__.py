"""Thin adapters that put a perfscope.Profiler into frameworks that own the training loop.

    from perfscope.hooks.integrations.lightning import PerfscopeCallback          # Lightning
    from perfscope.hooks.integrations.huggingface import PerfscopeTrainerCallback  # transformers.Trainer

Each module imports its framework when it is imported itself; perfscope never depends on them.
"""
