"""8-bit Adam/AdamW: the same algorithm with both moments block-quantized to 8 bits (Dettmers et al. 2022).

Design notes: docs/sweep.md."""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass
from typing import Any

from perfscope.knobs.base import KnobContext
from perfscope.knobs.compile import no_compiler_reason
from perfscope.knobs.lean_optimizer import LeanOptimizer
from perfscope.results.config import TrialConfig
from perfscope.results.messages import Message, msg
from perfscope.versions import major_minor


@dataclass(frozen=True)
class Implementation:
    choice: str
    """TrialConfig.optimizer value (perfscope.trial.step builds it)."""
    package: str
    """The distribution's name on PyPI."""
    min_version: tuple[int, int]
    """torchao: `torchao.optim` is public since 0.10 (a prototype module before)."""
    needs_cuda: bool
    needs_compiler: bool
    code: str
    """The constructor line, for the code change."""


IMPLEMENTATIONS = (
    Implementation(choice="8bit-torchao", package="torchao", min_version=(0, 10), needs_cuda=False, needs_compiler=True,
                   code="torchao.optim.AdamW8bit"),
    # Every bitsandbytes release has bnb.optim.AdamW8bit (and Adam8bit).
    Implementation(choice="8bit-bnb", package="bitsandbytes", min_version=(0, 0), needs_cuda=True, needs_compiler=False,
                   code="bnb.optim.AdamW8bit"),
)


def installed_version(package: str) -> tuple[int, int] | None:
    """(major, minor) of an installed distribution, None when it is not installed."""
    try:
        return major_minor(importlib.metadata.version(package))
    except importlib.metadata.PackageNotFoundError:
        return None


class AdamW8bit(LeanOptimizer):
    id = "adamw_8bit"
    title = "8-bit Adam/AdamW (quantized optimizer state)"
    reference = "https://github.com/pytorch/ao/tree/main/torchao/optim"
    replacement = "its 8-bit version"

    def _usable(self, ctx: KnobContext) -> tuple[list[Implementation], list[str]]:
        """(implementations that can run here, why each installed one cannot)."""
        usable, why = [], []
        for impl in IMPLEMENTATIONS:
            version = installed_version(impl.package)
            if version is None:
                continue
            if version < impl.min_version:
                why.append(f"{impl.package} {version[0]}.{version[1]} is older than {impl.min_version[0]}.{impl.min_version[1]}")
            elif impl.needs_cuda and not ctx.cuda:
                why.append(f"{impl.package}'s 8-bit optimizers need CUDA")
            elif impl.needs_compiler and (reason := no_compiler_reason(ctx)) is not None:
                why.append(f"{impl.package} compiles its optimizer step, and {reason}")
            else:
                usable.append(impl)
        return usable, why

    def code_change(self, ctx: KnobContext) -> str | None:
        usable, _ = self._usable(ctx)
        impl = usable[0] if usable else IMPLEMENTATIONS[0]
        module = "import bitsandbytes as bnb" if impl.package == "bitsandbytes" else "import torchao.optim"
        return (f"+{module}\n"
                "-optimizer = torch.optim.AdamW(model.parameters(), lr=lr)\n"
                f"+optimizer = {impl.code}(model.parameters(), lr=lr)   # Adam: {impl.code.replace('AdamW', 'Adam')}")

    def applies(self, ctx: KnobContext) -> str | None:
        if (reason := self.not_adam_type(ctx)) is not None:
            return reason
        usable, why = self._usable(ctx)
        if usable:
            return None
        if why:
            return "; ".join(why)
        return "no 8-bit optimizer is installed: pip install 'perfscope[lowmem]' (torchao), or bitsandbytes on CUDA"

    def variants(self, ctx: KnobContext) -> list[dict[str, Any]]:
        return [{"optimizer": impl.choice} for impl in self._usable(ctx)[0]]

    def active(self, config: TrialConfig) -> bool:
        return config.optimizer in {impl.choice for impl in IMPLEMENTATIONS}  # built by perfscope.trial.step

    def recipe_caveat(self, ctx: KnobContext) -> Message:
        return msg("adamw_8bit_recipe")
