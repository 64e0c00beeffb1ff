"""What the user's loop really runs — its matmul precision and torch.compile — observed, never assumed.

    observer = StepObserver(model)        # around the one step the Profiler counts under a dispatch mode
    with observer: ...                    # autocast seen at each forward; compiled code run eagerly
    observer.precision(fingerprint.matmul_flops_by_dtype)   # Observation("bf16", "…", known=True)
    compile_state(model, graphs_before)                     # Observation("default", "…", known=True)

Design notes: docs/hooks.md.
"""

from __future__ import annotations

import sys
import warnings
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from perfscope.measure.lazy_msg import msg

if TYPE_CHECKING:  # perfscope.results is not imported until results are built (a disabled Profiler stays light)
    from perfscope.results.config import CompileMode
    from perfscope.results.messages import Message

_AUTOCAST_NAMES = {torch.bfloat16: "bf16", torch.float16: "fp16"}
_REDUCED = ("bf16", "fp16")
_COUNTER_HOOKS_WARNING = r"Using `torch\.compile\(module\)` when there are global hooks"
"""What OptimizedModule.__call__ warns while FlopCounterMode's module tracker holds global hooks: ours, not the
user's, so it is silenced for the counted step only."""


@dataclass(frozen=True)
class Observation:
    """One setting of the loop: its value when observed (`known`), and how it was observed or why it was not."""

    value: Any
    evidence: str
    known: bool = True


def eager_counting_available() -> bool:
    """torch.compiler.set_stance (torch >= 2.6) can run compiled code eagerly for the counted step."""
    return callable(getattr(getattr(torch, "compiler", None), "set_stance", None))


def compiled_flops_unavailable(what: str) -> Message | None:
    """Why a compiled model gets no FLOP count: None where the counted step can run it eagerly (torch >= 2.6)."""
    if eager_counting_available():
        return None
    return msg("compiled_flops_unseen", what=what)


def graphs_compiled() -> int | None:
    """Graphs dynamo compiled in this process so far; None when dynamo was never imported (nothing compiled)."""
    if "torch._dynamo" not in sys.modules:
        return None
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


class StepObserver:
    """Watches the counted step: autocast at each forward of ``model``; compiled code forced eager while it runs.

    Enter at the counted step's start, exit at its end (the Profiler's FLOP-counting step); never raises out of
    exit, and leaves no hook or stance behind.
    """

    def __init__(self, model: Any, device_type: str) -> None:
        self.model = model
        self.device_type = device_type
        self.forwards: Counter[str] = Counter()
        """Forwards seen, by autocast state: "bf16" / "fp16" (autocast on, that dtype) or "off"."""
        self.forced_eager = False
        self._hook: Any = None
        self._stance: Any = None
        self._filter: Any = None

    def __enter__(self) -> StepObserver:
        if isinstance(self.model, torch.nn.Module):
            self._hook = self.model.register_forward_pre_hook(self._on_forward)
        warnings.filterwarnings("ignore", message=_COUNTER_HOOKS_WARNING, category=UserWarning)
        self._filter = warnings.filters[0]
        if eager_counting_available():
            self._stance = torch.compiler.set_stance("force_eager")  # applied now; __exit__ restores the previous
            self.forced_eager = True
        return self

    def __exit__(self, *exc: object) -> None:
        hook, self._hook = self._hook, None
        stance, self._stance = self._stance, None
        entry, self._filter = self._filter, None
        try:
            if hook is not None:
                hook.remove()
            if entry in warnings.filters:  # the user's own filters, added since, stay
                warnings.filters.remove(entry)
                warnings._filters_mutated()  # type: ignore[attr-defined]  # what filterwarnings itself calls
        finally:
            if stance is not None:
                stance.__exit__(None, None, None)

    def _on_forward(self, module: Any, args: Any) -> None:
        if torch.is_autocast_enabled(self.device_type):
            dtype = torch.get_autocast_dtype(self.device_type)
            self.forwards[_AUTOCAST_NAMES.get(dtype, str(dtype).removeprefix("torch."))] += 1
        else:
            self.forwards["off"] += 1

    def precision(self, matmul_flops_by_dtype: dict[str, float]) -> Observation:
        """The loop's precision from the counted step: the dtype most matmul FLOPs ran in, else autocast's (in
        words: "autocast bf16 at 2 of 2 forwards", "no autocast at the model's forward", "" when none was seen)."""
        total = sum(self.forwards.values())
        on = {k: n for k, n in self.forwards.items() if k != "off"}
        autocast = ", ".join(f"autocast {k} at {n} of {total} forwards" for k, n in sorted(on.items())) if on else \
            "no autocast at the model's forward" if total else ""
        return precision_from(matmul_flops_by_dtype, self.forwards, autocast)


def precision_from(matmul_flops_by_dtype: dict[str, float], forwards: Counter[str] | dict[str, int],
                   autocast: str = "") -> Observation:
    """fp32 when at least half the matmul FLOPs ran in fp32 (TF32 and autocast only change those); otherwise the
    reduced dtype with more FLOPs. No matmul at all: autocast's dtype if it was on, else not known."""
    total = sum(matmul_flops_by_dtype.values())
    suffix = f"; {autocast}" if autocast else ""
    if total > 0:
        shares = {k: v / total for k, v in matmul_flops_by_dtype.items() if v}
        mix = ", ".join(f"{share:.0%} {k}" for k, share in sorted(shares.items(), key=lambda kv: -kv[1]))
        evidence = f"matmul/conv/attention FLOPs of the counted step: {mix}{suffix}"
        reduced = {k: matmul_flops_by_dtype.get(k, 0.0) for k in _REDUCED}
        if shares.get("fp32", 0.0) >= 0.5:
            return Observation("fp32", evidence)
        if any(reduced.values()):
            return Observation(max(reduced, key=lambda k: reduced[k]), evidence)
        return Observation(None, evidence, known=False)  # fp64 or another dtype: none of a run's three precisions
    on = {k: n for k, n in forwards.items() if k != "off"}
    if on:
        dtype = max(on, key=lambda k: on[k])
        if dtype in _REDUCED:
            return Observation(dtype, f"the counted step ran no matmul/conv/attention{suffix}")
    return Observation(None, "the counted step ran no matmul, convolution or attention", known=False)


def compile_mode(model: Any) -> tuple[CompileMode, str]:
    """(TrialConfig.compile, backend words) of a compiled module; "default" where the mode cannot be read.

    Reads dynamo's backend chain (`_torchdynamo_orig_backend`, documented in torch._dynamo.convert_frame): the
    inductor wrapper keeps the options its mode set (reduce-overhead = CUDA graphs, max-autotune = autotuning).
    """
    try:
        backend = model.dynamo_ctx.callback
        while hasattr(backend, "_torchdynamo_orig_backend"):
            backend = backend._torchdynamo_orig_backend
        name = str(getattr(backend, "compiler_name", "") or "")
        options = dict(getattr(backend, "config", None) or {})
    except Exception:  # noqa: BLE001 - internals moved: the mode is not readable, compile still is observed
        return "default", "backend not readable"
    if name == "inductor" and options.get("max_autotune"):
        return "max-autotune", "inductor"
    if name == "inductor" and options.get("triton.cudagraphs"):
        return "reduce-overhead", "inductor"
    return "default", name or "backend not readable"


def compile_state(model: Any, graphs_at_start: int | None) -> Observation:
    """torch.compile in the loop: the model object says so, or dynamo compiled graphs while the Profiler watched.

    Eager is known only when nothing was compiled in this process at all; graphs compiled before the Profiler
    started, with a model that is not compiled itself, may belong to the loop (a compiled train step): unknown.
    """
    for candidate in (model, getattr(model, "module", None)):  # DDP(torch.compile(model)) keeps it in .module
        if candidate is not None and (
                hasattr(candidate, "_orig_mod")  # torch._dynamo.eval_frame.OptimizedModule
                or getattr(candidate, "_compiled_call_impl", None) is not None  # nn.Module.compile() (in place)
                or hasattr(getattr(candidate, "forward", None), "_torchdynamo_orig_callable")):  # forward = torch.compile(...)
            mode, backend = compile_mode(candidate)
            return Observation(mode, f"the model is torch.compile'd ({backend}, mode {mode})")
    now = graphs_compiled()
    if now is not None and now > (graphs_at_start or 0):
        return Observation("default", f"dynamo compiled {now - (graphs_at_start or 0)} graph(s) while the loop ran "
                                      "(a compiled function; mode not readable)")
    if not now:
        return Observation(None, "no torch.compile: the model is not compiled and dynamo compiled nothing in this process")
    return Observation(None, f"the model is not compiled, but dynamo compiled {now} graph(s) before the Profiler "
                             "started: whether the loop runs them cannot be told", known=False)


def observed_settings(declared_precision: str | None, precision: Observation | None,
                      compile: Observation) -> tuple[dict[str, Any], list[str]]:
    """The TrialConfig fields the observations settle, and those left unknown (Trial.unknown_settings). A precision
    the user passed wins over the observed one (it is their statement of the loop); a setting neither passed nor
    observed is unknown, never the default."""
    known: dict[str, Any] = {}
    unknown: list[str] = []
    if declared_precision is not None:
        known["precision"] = declared_precision
    elif precision is not None and precision.known:
        known["precision"] = precision.value
    else:
        unknown.append("precision")
    if compile.known:
        known["compile"] = compile.value
    else:
        unknown.append("compile")
    return known, unknown


def observed_words(precision: Observation | None, compile: Observation) -> dict[str, str]:
    """How each setting was observed, for the report's "declared" settings."""
    seen_precision = (f"{precision.value if precision.known else 'not known'} ({precision.evidence})" if precision
                      else "not known (the FLOP-counting step, which observes it, was not counted)")
    seen_compile = f"{(compile.value or 'off') if compile.known else 'not known'} ({compile.evidence})"
    return {"observed_precision": seen_precision, "observed_compile": seen_compile}
