"""The hooks' memory by category: two untimed steps after a capture_steps window, under torch.profiler's memory
profile, recorded as an analyze trial records it (TrialMetrics.memory_categories). On CPU, in this process.

Decided by byte counts and step counts, which load cannot move: a tiny transformer's window peaks on its
activations, and checkpointing its layers cuts the activations' share of the peak.
"""

from __future__ import annotations

import pytest
import torch

from perfscope.hooks.profiler import Profiler
from perfscope.results import TrialMetrics, msg
from perfscope.trace import memory_categories
from tests.test_memory_categories import _Encoder as Encoder  # the same two-layer encoder, profiled directly there

STEPS = 6
"""Step 0 warm-up, step 1 traced, steps 2-3 the memory window, steps 4-5 timed."""


def hooked_loop(*, checkpointed: bool = False, memory: bool = True) -> TrialMetrics:
    """A training loop with the hooks and a one-step capture window; the run's metrics."""
    torch.manual_seed(0)
    model = Encoder(checkpointed)
    opt = torch.optim.AdamW(model.parameters())
    prof = Profiler(model, opt, device="cpu", warmup_steps=1, capture_steps=(1, 2), memory=memory, count_flops=False,
                    sample_utilization=False, measure_ceiling=False, peak_tflops=1.0, live=False)
    for x in prof.wrap([torch.randn(8, 64, 32) for _ in range(STEPS)]):
        model(x).square().mean().backward()
        opt.step()
        opt.zero_grad()
        prof.step()
    results = prof.results()
    assert results is not None and results.trials[0].metrics is not None
    return results.trials[0].metrics


def test_a_hooks_window_peaks_on_activations_and_checkpointing_cuts_their_share() -> None:
    plain, ckpt = hooked_loop(), hooked_loop(checkpointed=True)
    held, held_ckpt = plain.memory_categories, ckpt.memory_categories
    assert held is not None and held_ckpt is not None, (plain.unavailable, ckpt.unavailable)
    n = sum(p.numel() for p in Encoder(False).parameters())
    assert held.device == "cpu" and held.at_peak["parameter"] == 4 * n  # fp32 weights, exactly
    assert held.peak_category == "activation" and held.share("activation") > 0.5
    # Checkpointed, the forward keeps each layer's input only: the activations' share falls (73 % → 5 % measured).
    assert held_ckpt.peak_category != "activation"
    assert held_ckpt.share("activation") < held.share("activation") / 4  # type: ignore[operator]
    assert plain.steps == STEPS - 1 - 1 - 2  # the memory window's steps are not timed


def test_memory_false_records_no_categories_and_times_those_steps() -> None:
    m = hooked_loop(memory=False)
    assert m.memory_categories is None and "memory_categories" not in m.unavailable
    assert m.steps == STEPS - 1 - 1


def test_a_failed_memory_window_is_a_reason_not_a_broken_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(device: str, seen: list) -> None:
        raise RuntimeError("no memory profile here")

    monkeypatch.setattr(memory_categories, "memory_window", broken)
    m = hooked_loop()
    assert m.memory_categories is None and m.trace_path is not None  # the trace and the timed steps are kept
    why = m.unavailable["memory_categories"]
    assert why.code == "memory_categories_failed" and why.params["error"] == msg(
        "exception", error="RuntimeError: no memory profile here")
