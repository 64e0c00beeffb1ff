"""One rank summary (perfscope.measure.ranks.rank_metrics) for the trials' ranks and the hooks' ranks."""

from __future__ import annotations

import pytest
import torch

from perfscope.hooks.distributed import RankPlace
from perfscope.hooks.distributed import rank_metrics as hooks_rank_metrics
from perfscope.measure import memory
from perfscope.measure.ranks import rank_metrics
from perfscope.measure.window import GcPauses, assemble_metrics
from perfscope.results import Contention, MemoryBreakdown, Window
from perfscope.results.messages import msg

PLACE = RankPlace(rank=1, world_size=2, local_rank=1, local_world_size=2, node="host-a", backend="gloo")


def _metrics(windows: list[Window]):
    return assemble_metrics(windows, [], micro_batch_size=4, grad_accum_steps=1, warmup_steps=1)


def test_samples_are_none_when_any_window_is_unknown() -> None:
    """A sum that skipped the unknown window would understate the job's samples/s over the full wall time."""
    known = Window(steps=5, samples=20, wall_s=1.0)
    unknown = Window(steps=5, samples=None, wall_s=1.0)
    assert rank_metrics(_metrics([known, known]), rank=0, local_rank=0, node="n").samples == 40
    ranked = rank_metrics(_metrics([known, unknown]), rank=0, local_rank=0, node="n")
    assert ranked.samples is None and ranked.steps == 10 and ranked.wall_s == 2.0


def test_other_cores_are_wall_weighted_over_every_window_that_measured_them() -> None:
    windows = [Window(steps=1, samples=4, wall_s=1.0, contention=Contention(other_cpu_cores=1.0)),
               Window(steps=3, samples=12, wall_s=3.0, contention=Contention(other_cpu_cores=3.0)),
               Window(steps=1, samples=4, wall_s=5.0)]  # no reading: not in the mean
    ranked = rank_metrics(_metrics(windows), rank=0, local_rank=0, node="n")
    assert ranked.other_cpu_cores == pytest.approx((1.0 * 1 + 3.0 * 3) / 4)
    none = rank_metrics(_metrics([Window(steps=1, samples=4, wall_s=1.0)]), rank=0, local_rank=0, node="n")
    assert none.other_cpu_cores is None and "other_cpu_cores" in none.unavailable


def test_memory_owners_come_from_the_runs_breakdown_and_gc_from_its_pauses() -> None:
    m = _metrics([Window(steps=1, samples=4, wall_s=1.0)])
    m.memory_breakdown = MemoryBreakdown(parameters=100, gradients=100, optimizer_state=200, activations_and_temporaries=None)
    pauses = GcPauses()
    pauses.collections, pauses.pause_s = 3, 0.01
    ranked = rank_metrics(m, rank=2, local_rank=0, node="n", gc_pauses=pauses)
    assert (ranked.parameter_bytes, ranked.gradient_bytes, ranked.optimizer_state_bytes) == (100, 100, 200)
    assert (ranked.gc_collections, ranked.gc_pause_s) == (3, 0.01)
    assert "gc_collections" in rank_metrics(m, rank=2, local_rank=0, node="n").unavailable


def test_gradient_bytes_do_not_depend_on_whether_grads_are_present() -> None:
    """The hooks summarise at save(): before or after the loop's zero_grad(set_to_none=True), the same figure."""
    model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.Linear(4, 2))
    model[1].weight.requires_grad_(False)
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    freed = hooks_rank_metrics(PLACE, None, model, opt, "warm-up only")
    model(torch.randn(3, 8)).sum().backward()
    present = hooks_rank_metrics(PLACE, None, model, opt, "warm-up only")
    assert freed.gradient_bytes == present.gradient_bytes == memory.trainable_parameter_bytes(model)
    assert freed.gradient_bytes < memory.parameter_bytes(model)  # the frozen weight has no gradient
    assert freed.unavailable["steps"] == msg("exception", error="warm-up only")


def test_trials_and_hooks_summarise_a_rank_alike() -> None:
    """The hooks' adapter is the core with the hooks' place: same metrics in, same RankMetrics out."""
    m = _metrics([Window(steps=4, samples=16, wall_s=2.0, contention=Contention(other_cpu_cores=0.5))])
    m.memory_breakdown = MemoryBreakdown(parameters=10, gradients=10, optimizer_state=20, activations_and_temporaries=None)
    m.peak_memory_bytes = 1234
    core = rank_metrics(m, rank=PLACE.rank, local_rank=PLACE.local_rank, node=PLACE.node)
    assert hooks_rank_metrics(PLACE, m, None, None) == core
    assert core.samples_per_s == pytest.approx(8.0) and core.peak_memory_bytes == 1234


def test_a_trial_rank_and_a_hooks_rank_report_the_same_window_alike() -> None:
    """perfscope.trial.rank and perfscope.hooks.distributed differ only in what each can observe: the trial tracks GC
    (and runs a compute-only window where the strategy allows one), the hooks do not."""
    from perfscope.results.config import TrialConfig
    from perfscope.trial.data_parallel import RankInfo
    from perfscope.trial.loop import MeasuredRun
    from perfscope.trial.rank import rank_metrics as trial_rank_metrics

    m = _metrics([Window(steps=4, samples=16, wall_s=2.0, contention=Contention(other_cpu_cores=0.5)),
                  Window(steps=2, samples=None, wall_s=1.0)])
    m.memory_breakdown = MemoryBreakdown(parameters=10, gradients=10, optimizer_state=20, activations_and_temporaries=None)
    pauses = GcPauses()
    pauses.collections = 2
    run = MeasuredRun(metrics=m, step=None, gc_pauses=pauses)  # type: ignore[arg-type] - FSDP: no compute-only window
    config = TrialConfig(micro_batch_size=4, nproc_per_node=2, data_parallel="fsdp")
    trial = trial_rank_metrics(run, RankInfo(PLACE.rank, PLACE.local_rank, 2, PLACE.node, "gloo"), config)
    hooks = hooks_rank_metrics(PLACE, m, None, None)
    assert trial.samples is None and trial.other_cpu_cores == pytest.approx(0.5) and trial.gc_collections == 2
    assert "local_step_times_s" in trial.unavailable and "gc_collections" in hooks.unavailable
    same = {k: v for k, v in vars(trial).items() if k not in ("gc_collections", "gc_pause_s", "unavailable")}
    assert same == {k: v for k, v in vars(hooks).items() if k not in ("gc_collections", "gc_pause_s", "unavailable")}
