"""torch.compile: fuses elementwise ops and removes Python overhead (1.41× geomean training speed-up on
an A100 over 180+ models, PyTorch 2 paper); `reduce-overhead` adds CUDA graphs for launch-bound steps.
Compile time is reported apart from the steady-state step time."""

from __future__ import annotations

import os
import shutil
from typing import TYPE_CHECKING, Any

from perfscope.knobs.base import Knob, KnobContext
from perfscope.results.config import TrialConfig
from perfscope.results.messages import Message, msg
from perfscope.snippets import compile_change

if TYPE_CHECKING:
    from perfscope.knobs.base import Observed


def no_compiler_reason(ctx: KnobContext) -> str | None:
    """torch.compile needs a host compiler on both devices: on CPU inductor emits C++; on CUDA, Triton builds its
    kernel launcher (a small C extension) with $CC, else gcc or clang, the first time a kernel runs."""
    cc = os.environ.get("CC")
    if (cc and shutil.which(cc)) or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang"):
        return None
    if ctx.cuda:
        return "torch.compile on CUDA needs a C compiler (Triton builds its kernel launcher with $CC, gcc or clang), and none was found"
    return "torch.compile on CPU needs a C++ compiler, and none was found"


class Compile(Knob):
    id = "compile"
    title = "torch.compile"
    reference = "https://pytorch.org/docs/stable/generated/torch.compile.html"
    fields = ("compile",)
    value = "default"
    addresses = ("elementwise", "normalization", "host", "launch")

    def code_change(self, ctx: KnobContext) -> str | None:
        return compile_change(ctx.device)

    def applies(self, ctx: KnobContext) -> str | None:
        if ctx.base.compile is not None:
            return f"the model is already compiled (mode {ctx.base.compile})"
        return no_compiler_reason(ctx)

    def config_words(self, config: TrialConfig) -> str | None:
        return f"torch.compile {config.compile}" if config.compile else "eager"

    def active(self, config: TrialConfig) -> bool:
        return config.compile is not None and config.compile != "reduce-overhead"

    def apply_to_step_module(self, module: Any, config: TrialConfig) -> Any:
        return compiled(module, config)

    def not_applied(self, config: TrialConfig, seen: Observed) -> Message | None:
        return compile_not_applied(seen.compiled_graphs)


def compile_not_applied(graphs: int | None) -> Message | None:
    """Why a compiled trial did not compile (None: it did). Dynamo can enter frames and still compile no graph:
    a backend error under `torch._dynamo.config.suppress_errors` falls back to eager with frames counted."""
    if graphs is None:
        return msg("compile_no_dynamo")
    if graphs == 0:
        return msg("compile_no_graph")
    return None


def compiled(module: Any, config: TrialConfig) -> Any:
    import torch

    return torch.compile(module, mode=config.compile)


class CompileReduceOverhead(Knob):
    id = "compile_reduce_overhead"
    title = "torch.compile(mode=\"reduce-overhead\") (CUDA graphs)"
    reference = "https://pytorch.org/docs/stable/torch.compiler_cudagraph_trees.html"
    fields = ("compile",)
    value = "reduce-overhead"
    shares_field = True
    addresses = ("launch", "host")

    def code_change(self, ctx: KnobContext) -> str | None:
        return compile_change(ctx.device, "reduce-overhead") if ctx.cuda else None

    def applies(self, ctx: KnobContext) -> str | None:
        if not ctx.cuda:
            return "CUDA graphs need a GPU"
        if ctx.base.compile == "reduce-overhead":
            return "the model is already compiled with reduce-overhead"
        if (reason := no_compiler_reason(ctx)) is not None:
            return reason
        if ctx.base.grad_accum_steps > 1:
            # CUDA-graph outputs live in the graph's static memory pool: the gradients kept in .grad between
            # accumulation micro-steps are overwritten by the next replay (wrong gradients or a RuntimeError).
            return (f"the loop accumulates gradients ({ctx.base.grad_accum_steps} micro-steps): CUDA graphs overwrite the "
                    "outputs kept in .grad by the next replay (pytorch/pytorch#169545, open)")
        return None

    def apply_to_step_module(self, module: Any, config: TrialConfig) -> Any:
        return compiled(module, config)

    def not_applied(self, config: TrialConfig, seen: Observed) -> Message | None:
        return compile_not_applied(seen.compiled_graphs)
