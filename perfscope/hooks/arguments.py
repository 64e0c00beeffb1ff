"""The Profiler's arguments, checked once at construction: a wrong argument is the caller's error, raised at once
(after construction an internal error never reaches the user's loop: the Profiler warns once and disables itself)."""

from __future__ import annotations

from typing import Any

import torch

PRECISIONS = ("fp32", "bf16", "fp16")


def check_precision(precision: str | None) -> None:
    if precision is not None and precision not in PRECISIONS:
        raise ValueError(f"Profiler(precision=...) must be 'fp32', 'bf16', 'fp16' or None, got {precision!r}")


def check_arguments(*, warmup_steps: Any, max_step_samples: Any, flush_every: Any, samples_per_step: Any,
                    tokens_per_sample: Any, precision: Any, gather_timeout_s: Any, capture_steps: Any) -> None:
    """ValueError naming the argument and what it must be."""
    for arg, value in (("warmup_steps", warmup_steps), ("max_step_samples", max_step_samples),
                       ("flush_every", flush_every)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"Profiler({arg}=...) must be an int >= 1, got {value!r}")
    for arg, value in (("samples_per_step", samples_per_step), ("tokens_per_sample", tokens_per_sample)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"Profiler({arg}=...) must be a positive int or None, got {value!r}")
    check_precision(precision)
    if isinstance(gather_timeout_s, bool) or not isinstance(gather_timeout_s, int | float) or not gather_timeout_s > 0:
        raise ValueError(f"Profiler(gather_timeout_s=...) must be a number > 0, got {gather_timeout_s!r}")
    if capture_steps is not None:
        start, stop = capture_steps
        if not (isinstance(start, int) and isinstance(stop, int) and 1 <= start < stop):
            raise ValueError(f"Profiler(capture_steps=(start, stop)) needs 1 <= start < stop, got {capture_steps!r}")


def check_described(config: dict[str, Any]) -> None:
    """Profiler.describe()'s settings must be TrialConfig fields (a typo would silently describe nothing)."""
    from dataclasses import fields

    from perfscope.results import TrialConfig

    unknown = sorted(set(config) - {f.name for f in fields(TrialConfig)})
    if unknown:
        raise ValueError(f"Profiler.describe(): not TrialConfig fields: {', '.join(unknown)}")
    if "precision" in config:
        check_precision(config["precision"])


def loader_settings(loader: Any) -> dict[str, Any] | None:
    """A DataLoader's settings as TrialConfig names them; None for anything else."""
    if not isinstance(loader, torch.utils.data.DataLoader):
        return None
    return {"num_workers": loader.num_workers, "pin_memory": loader.pin_memory,
            "prefetch_factor": loader.prefetch_factor, "persistent_workers": loader.persistent_workers}


def resolve_device(device: str | torch.device | None, model: torch.nn.Module | None) -> torch.device:
    """"auto": the model's device, else CUDA when available; plain "cuda" is the current device."""
    if device in (None, "auto"):
        param = next(model.parameters(), None) if model is not None else None
        if param is not None:
            return param.device
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    resolved = torch.device(device)
    if resolved.type == "cuda" and resolved.index is None:
        resolved = torch.device("cuda", torch.cuda.current_device() if torch.cuda.is_available() else 0)
    return resolved
