"""Memory by category from torch.profiler's own categorisation (perfscope.trace.memory_categories), on CPU.

Byte counts, not times: what a loaded machine cannot move. The MLP's parameter, gradient and AdamW-state bytes are
known exactly (fp32: 4 B per parameter each for the weights and gradients; AdamW keeps exp_avg and exp_avg_sq,
8 B per parameter, and one fp32 step counter per parameter tensor).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.profiler import ProfilerActivity, profile, schedule
from torch.utils.checkpoint import checkpoint

from perfscope.results import Finding, MemoryBreakdown, MemoryCategories, TrialMetrics, from_jsonable, to_jsonable
from perfscope.results.config import TrialConfig
from perfscope.rules import run_rules
from perfscope.rules._text import pct
from perfscope.trace.capture import TraceCapture
from perfscope.trace.memory_categories import memory_breakdown, memory_text, owners, profile_step_memory, read_memory
from perfscope.trial.loop import capture_trace, run_trial
from perfscope.workload import load_workload
from tests.factories import make_results, make_trial

GiB = 2**30


def _profile(model: torch.nn.Module, x: torch.Tensor, *, foreach: bool = True, active: int = 1) -> MemoryCategories:
    """One untraced step (AdamW's state exists from then on), one warm-up step, ``active`` profiled steps."""
    opt = torch.optim.AdamW(model.parameters(), foreach=foreach)

    def step() -> None:
        model(x).square().mean().backward()
        opt.step()
        opt.zero_grad()

    step()
    seen: list[MemoryCategories] = []
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=1, active=active),
                 profile_memory=True, record_shapes=True, with_stack=True,
                 on_trace_ready=lambda prof: seen.append(memory_breakdown(prof, "cpu"))) as prof:
        for _ in range(1 + active):
            step()
            prof.step()
    return seen[0]


@pytest.mark.parametrize("foreach", [False, True])
def test_parameters_gradients_and_adamw_state_are_the_bytes_they_must_be(foreach: bool) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 64))
    n, tensors = sum(p.numel() for p in model.parameters()), len(list(model.parameters()))
    mem = _profile(model, torch.randn(16, 64), foreach=foreach, active=2)
    assert mem.max_bytes["parameter"] == 4 * n
    assert mem.max_bytes["gradient"] == 4 * n
    assert mem.max_bytes["optimizer_state"] == 8 * n + 4 * tensors
    assert mem.at_peak["parameter"] == 4 * n and mem.at_peak["optimizer_state"] == 8 * n + 4 * tensors
    assert mem.peak_bytes == sum(mem.at_peak.values())
    held = owners(mem)  # the results' breakdown by owner at the peak: the rest is activations and temporaries
    grads = mem.at_peak.get("gradient", 0)
    assert (held.parameters, held.gradients, held.optimizer_state) == (mem.at_peak["parameter"], grads, 8 * n + 4 * tensors)
    assert held.activations_and_temporaries == mem.peak_bytes - 4 * n - grads - (8 * n + 4 * tensors)
    if not foreach:
        # torch names the single-tensor AdamW's exp_avg_sq.sqrt() a parameter; born and freed in the window, it is
        # booked as a temporary (one per parameter tensor, in the first profiled step).
        assert mem.reclassified_bytes == 4 * n


class _Encoder(torch.nn.Module):
    def __init__(self, checkpointed: bool) -> None:
        super().__init__()
        self.checkpointed = checkpointed
        self.layers = torch.nn.ModuleList(torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
                                          for _ in range(2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = checkpoint(layer, x, use_reentrant=False) if self.checkpointed else layer(x)
        return x


def test_a_small_transformer_peaks_on_activations_and_checkpointing_moves_the_peak() -> None:
    x = torch.randn(8, 64, 32)
    torch.manual_seed(0)
    plain = _profile(_Encoder(checkpointed=False), x)
    torch.manual_seed(0)
    ckpt = _profile(_Encoder(checkpointed=True), x)
    assert plain.peak_category == "activation"
    assert plain.at_peak["activation"] > plain.peak_bytes / 2
    # Checkpointed, the forward keeps only each layer's input; the peak moves into the backward's recomputation
    # (torch calls what it holds there autograd detail) and is lower.
    assert ckpt.peak_category != "activation"
    assert ckpt.at_peak["activation"] < plain.at_peak["activation"] / 4
    assert ckpt.peak_bytes < plain.peak_bytes
    assert "activation" in memory_text(plain) and plain.device == "cpu"


def test_a_capture_window_with_memory_writes_the_breakdown_beside_its_trace(tmp_path) -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(32, 32)
    opt = torch.optim.AdamW(model.parameters())
    with TraceCapture(tmp_path, device="cpu", wait=0, warmup=1, active=1, memory=True) as cap:
        for _ in range(cap.total_steps):
            model(torch.randn(4, 32)).sum().backward()
            opt.step()
            opt.zero_grad()
            cap.step()
    assert cap.path is not None and cap.memory_path is not None, cap.note
    assert cap.memory is not None and cap.memory.max_bytes["parameter"] == 4 * (32 * 32 + 32)
    assert cap.memory_path.name == "memory-rank0.json" and read_memory(cap.memory_path) == cap.memory
    (tmp_path / "bad.json").write_text('{"peak": 1}')
    with pytest.raises(ValueError, match=r"bad\.json: not a memory breakdown"):
        read_memory(tmp_path / "bad.json")


def test_a_breakdown_needs_the_profilers_memory_options() -> None:
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        torch.ones(3).sum()
    with pytest.raises(ValueError, match="profile_memory=True"):
        memory_breakdown(prof, "cpu")


def _near_oom(held: MemoryCategories | None) -> dict[str, Finding]:
    """A CUDA run at 96 % of its device's memory (PS502 fires), AdamW state 40 % of its peak (PS503 fires)."""
    results = make_results([make_trial(median_s=0.1)], device_type="cuda")
    m = results.trials[0].metrics
    m.peak_memory_bytes, m.peak_reserved_bytes, m.device_memory_capacity_bytes = 74 * GiB, 77 * GiB, 80 * GiB
    m.memory_breakdown = MemoryBreakdown(parameters=8 * GiB, gradients=8 * GiB, optimizer_state=30 * GiB,
                                         activations_and_temporaries=28 * GiB)
    m.memory_categories = held
    return {f.rule_id: f for f in run_rules(results)}


def test_the_memory_rules_cite_the_category_at_the_peak_only_when_measured() -> None:
    """A small transformer's profiled step (its peak is activations) feeds the rules: checkpointing's and the lean
    optimizers' findings cite each category's share of that peak; without the profile they claim nothing of it."""
    torch.manual_seed(0)
    model = _Encoder(checkpointed=False)
    opt = torch.optim.AdamW(model.parameters())
    x = torch.randn(8, 64, 32)

    def step() -> None:
        model(x).square().mean().backward()
        opt.step()
        opt.zero_grad()

    step()  # AdamW's state exists from here, as in a trial after its warm-up
    held = profile_step_memory(step, "cpu")
    assert held.peak_category == "activation"
    share = held.at_peak["activation"] / held.peak_bytes
    found = _near_oom(held)
    assert f"activations hold {pct(share)} of a profiled step's" in " ".join(found["PS502"].evidence)
    assert "the most of any category (torch.profiler memory categories)" in " ".join(found["PS502"].evidence)
    state = held.at_peak["optimizer_state"] / held.peak_bytes
    assert f"optimizer state holds {pct(state)} of a profiled step's" in " ".join(found["PS503"].evidence)
    assert "activations hold the most" in " ".join(found["PS503"].evidence)
    unmeasured = _near_oom(None)
    assert not any("memory categories" in line for f in unmeasured.values() for line in f.evidence)
    assert unmeasured["PS502"].estimate_bound == found["PS502"].estimate_bound  # the rest is as without it


def test_a_traced_trial_records_its_memory_by_category(tmp_path: Path) -> None:
    """The real trial loop, in this process: after the trace window, a profiled step's categories land in the
    trial's metrics and survive the results' JSON; results written before the field read it as None."""
    config = TrialConfig(device="cpu", micro_batch_size=8, steps=2, warmup_steps=1, sample_utilization=False,
                         count_flops=False, capture_trace=True)
    run = run_trial(load_workload(Path(__file__).parent / "workloads" / "mlp.py"), config)
    capture_trace(run, config, tmp_path)
    held = run.metrics.memory_categories
    assert held is not None, run.metrics.unavailable
    params = 4 * (32 * 64 + 64 + 64 * 10 + 10)  # mlp.py's fp32 weights, all touched by every step
    assert held.at_peak["parameter"] == params and held.peak_bytes == sum(held.at_peak.values())
    assert held.device == "cpu" and held.peak_category in held.at_peak
    data = to_jsonable(run.metrics)
    assert from_jsonable(TrialMetrics, data).memory_categories == held
    del data["memory_categories"]
    assert from_jsonable(TrialMetrics, data).memory_categories is None
