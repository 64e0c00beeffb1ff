"""perfscope.Profiler in a user's own loop: metrics, disabled mode, self-disabling on errors, files."""

from __future__ import annotations

import subprocess
import sys
import time
import types
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import perfscope
from perfscope.hooks.profiler import Profiler, leading_dim
from perfscope.hooks.tally import Reservoir
from perfscope.measure import build
from perfscope.measure.window import StepRecord, WindowRecorder
from perfscope.results import Results
from perfscope.wording import words
from tests.flops_oracle import linear_training_flops

IN, HIDDEN, OUT, BATCH = 32, 64, 16, 8


def make_model() -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(IN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, OUT))
    return model, torch.optim.AdamW(model.parameters(), lr=1e-3)


def make_loader(n: int = 100, batch: int = BATCH) -> torch.utils.data.DataLoader:
    g = torch.Generator().manual_seed(1)
    ds = torch.utils.data.TensorDataset(torch.randn(n, IN, generator=g), torch.randint(0, OUT, (n,), generator=g))
    return torch.utils.data.DataLoader(ds, batch_size=batch)


def train_step(model: nn.Module, opt: torch.optim.Optimizer, batch: tuple[torch.Tensor, torch.Tensor]) -> None:
    x, y = batch
    F.cross_entropy(model(x), y).backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def quiet(**kwargs) -> dict:
    """Fast defaults for tests: no matmul ceiling, no sampler thread."""
    return {"measure_ceiling": False, "sample_utilization": False, "peak_tflops": 1.0, **kwargs}


def mlp_flops(batch: int) -> int:
    return linear_training_flops(batch, IN, HIDDEN, input_requires_grad=False) + linear_training_flops(
        batch, HIDDEN, OUT, input_requires_grad=True
    )


# ------------------------------------------------------------------------------------------ metrics


SLOW_WARMUP_S = 1.0


def test_step_count_warmup_and_short_last_batches() -> None:
    model, opt = make_model()
    loader = make_loader(100)  # 13 batches per epoch: 12 of 8 samples, then 4
    prof = Profiler(model, opt, device="cpu", warmup_steps=3, **quiet())
    seen = 0
    for _ in range(2):
        for batch in prof.wrap(loader):
            if seen < 3:
                time.sleep(SLOW_WARMUP_S)  # slow warm-up steps: they must not reach the timings
            train_step(model, opt, batch)
            prof.step()
            seen += 1
    results = prof.results()
    m = results.trials[0].metrics
    assert seen == 26
    assert m.steps == 26 - 3 - 1  # warm-up and the FLOP-counting step (index 3) are not timed
    assert m.warmup_steps == 3
    assert len(m.step_times_s) == len(m.step_data_wait_s) == m.steps
    assert max(m.step_times_s) < SLOW_WARMUP_S  # a timed step of this MLP is milliseconds, ~0.35 s on a loaded 2-core VM
    assert m.samples_per_step == BATCH and m.micro_batch_size == BATCH and m.grad_accum_steps == 1
    # Timed steps are 4..25; step i of each epoch's 13 is short (4 samples) when i % 13 == 12.
    expected = sum(4 if i % 13 == 12 else 8 for i in range(4, 26))
    assert m.samples_per_s * m.wall_s == pytest.approx(expected, rel=1e-6)  # samples in the window / its wall time
    assert m.wall_s == pytest.approx(sum(m.step_times_s), rel=1e-6)
    assert [n.params for n in results.notes if n.code == "samples_per_step_varied"] == [{"low": 4, "high": 8}]
    assert results.trials[0].config.num_workers == 0
    assert "data_wait_share" not in m.unavailable and all(w >= 0 for w in m.step_data_wait_s)


def test_flops_match_analytic_mlp_and_scale_for_a_short_counted_batch() -> None:
    model, opt = make_model()
    sizes = [8, 8, 8, 4] + [8] * 6  # the FLOP-counting step (index 3) has a short batch
    batches = [(torch.randn(n, IN), torch.randint(0, OUT, (n,))) for n in sizes]
    prof = Profiler(model, opt, device="cpu", warmup_steps=3, **quiet())
    for batch in prof.wrap(batches):
        train_step(model, opt, batch)
        prof.step()
    m = prof.results().trials[0].metrics
    assert m.flops_per_step == pytest.approx(mlp_flops(8))  # counted on 4 samples, scaled per sample to 8
    assert any(note.code == "flops_scaled" for note in m.flop_notes)
    assert m.mfu == pytest.approx(m.flops_per_step * m.steps / m.wall_s / 1e12)  # work / wall time


def test_gradient_accumulation_counts_micro_steps_through_wrap() -> None:
    model, opt = make_model()
    prof = Profiler(model, opt, device="cpu", warmup_steps=2, **quiet())
    for i, (x, y) in enumerate(prof.wrap(make_loader(8 * 4 * 10))):
        (F.cross_entropy(model(x), y) / 4).backward()
        if (i + 1) % 4 == 0:
            opt.step()
            opt.zero_grad()
            prof.step()
    m = prof.results().trials[0].metrics
    assert prof.steps_completed == 10 and m.steps == 10 - 2 - 1
    assert (m.grad_accum_steps, m.micro_batch_size, m.samples_per_step) == (4, BATCH, 4 * BATCH)
    assert m.flops_per_step == pytest.approx(4 * mlp_flops(BATCH))  # the counted step holds all 4 micro-batches


def test_explicit_micro_steps_without_wrap() -> None:
    model, opt = make_model()
    prof = Profiler(model, opt, device="cpu", warmup_steps=1, count_flops=False, **quiet())
    batches = list(make_loader(8 * 3 * 6))
    for i, batch in enumerate(batches):
        F.cross_entropy(model(batch[0]), batch[1]).backward()
        prof.micro_step(samples=len(batch[0]))
        if (i + 1) % 3 == 0:
            opt.step()
            opt.zero_grad()
            prof.step()
    m = prof.results().trials[0].metrics
    assert (m.steps, m.grad_accum_steps, m.samples_per_step) == (5, 3, 3 * BATCH)
    assert "data_wait_share" in m.unavailable  # not measured without wrap()
    assert "flops_per_step" in m.unavailable and m.mfu is None


def test_samples_per_step_argument_and_step_context() -> None:
    model, opt = make_model()
    prof = Profiler(model, opt, device="cpu", warmup_steps=1, samples_per_step=100, tokens_per_sample=10, **quiet())
    for batch in prof.wrap(make_loader(64)):
        with prof.step_context():
            train_step(model, opt, batch)
    m = prof.results().trials[0].metrics
    assert m.steps == 8 - 1 - 1
    assert m.samples_per_step == 100
    assert m.tokens_per_s == pytest.approx(m.samples_per_s * 10)


def test_wrap_passes_batches_through_unchanged() -> None:
    items = [{"x": torch.ones(3, 2), "meta": ["a"]}, (torch.zeros(5), object()), "not a tensor", None, 7]
    prof = Profiler(device="cpu", **quiet())
    out = []
    for item in prof.wrap(items):
        out.append(item)
        prof.step()
    assert len(out) == len(items) and all(a is b for a, b in zip(out, items))


def test_leading_dim_finds_the_first_tensor() -> None:
    assert leading_dim({"input_ids": torch.zeros(4, 7), "labels": torch.zeros(9)}) == 4
    assert leading_dim([("text",), [torch.zeros(6, 2)]]) == 6
    assert leading_dim(torch.tensor(1.0)) is None and leading_dim("x") is None


def test_reservoir_is_bounded_uniform_and_in_order() -> None:
    res = Reservoir(100, seed=0)
    for i in range(10_000):
        res.add(StepRecord(i, 0.0, 0.0, 0.0, None, 1))
    kept = res.in_order()
    assert res.seen == 10_000 and len(kept) == 100
    assert [s.index for s in kept] == sorted(s.index for s in kept)
    assert 3_000 < sum(s.index for s in kept) / 100 < 7_000  # uniform over the stream, not the first or last 100


def test_long_run_keeps_bounded_per_step_samples() -> None:
    prof = Profiler(device="cpu", warmup_steps=1, max_step_samples=10, count_flops=False, flush_every=7, **quiet())
    for _ in prof.wrap([torch.zeros(2)] * 60):
        prof.step()
    m = prof.results().trials[0].metrics
    assert m.steps == 59 and len(m.step_times_s) == 10
    assert m.step_times_sampled and [n.params for n in prof.results().notes if n.code == "step_times_sampled"] == [
        {"timed": 59, "kept": 10}]


class FakeDeviceClock:
    """Stands in for CUDA events: a mark completes only when the fake device has caught up with it."""

    device_type = "cpu"  # no data-wait event pairs: only the step boundaries are marks
    now = staticmethod(time.perf_counter)  # the host's own waits

    def __init__(self) -> None:
        self.marks = 0
        self.done = 0
        self.waits: list[int] = []

    def mark(self) -> int:
        self.marks += 1
        self.done = max(self.done, self.marks - 3)  # the device runs 3 steps behind the host
        return self.marks

    def ready(self, mark: int) -> bool:
        return mark <= self.done

    def wait(self, mark: int) -> None:
        self.waits.append(mark)
        self.done = max(self.done, mark)

    def elapsed_s(self, start: int, end: int) -> float:
        return (end - start) * 0.01


def test_device_events_are_read_lazily_with_bounded_pending() -> None:
    clock = FakeDeviceClock()
    recorder = WindowRecorder(clock, contention=False, flush_every=10)  # type: ignore[arg-type]
    recorder.start()
    max_pending = 0
    for _ in range(200):
        recorder.step_end(samples=1)
        max_pending = max(max_pending, len(recorder._pending))
    assert clock.waits == []  # the device keeps up: no step ever waited on an event
    assert max_pending <= 2 * 10 + 1
    window = recorder.finish()  # waits once, on the newest event
    assert clock.waits == [clock.marks]
    assert window.steps == 200 and window.wall_s == pytest.approx(2.0)


def test_a_device_far_behind_is_waited_on_an_old_event_only() -> None:
    clock = FakeDeviceClock()
    clock.mark = lambda: setattr(clock, "marks", clock.marks + 1) or clock.marks  # the device never catches up
    recorder = WindowRecorder(clock, contention=False, flush_every=10)  # type: ignore[arg-type]
    recorder.start()
    for _ in range(100):
        recorder.step_end(samples=1)
    assert clock.waits and all(w <= clock.marks - 10 for w in clock.waits)
    assert len(recorder._pending) <= 2 * 10 + 1


def test_no_timed_step_gives_a_skipped_trial(tmp_path: Path) -> None:
    prof = Profiler(device="cpu", warmup_steps=5, **quiet())
    for _ in prof.wrap([torch.zeros(2)] * 3):
        prof.step()
    path = prof.save(tmp_path)
    results = Results.load(path)
    (said,) = [n for n in results.notes if n.code == "hooks_no_timed_step"]
    assert said.params == {"seen": 3, "warmup": 5, "excluded": {}}
    assert results.trials[0].status == "skipped" and results.trials[0].error == words(said)


# ----------------------------------------------------------------------------------- safety / no-ops


def test_disabled_is_a_cheap_no_op(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    loader = make_loader(32)
    for prof in (Profiler(enabled=False), _env_disabled(monkeypatch)):
        it = prof.wrap(loader)
        assert type(it) is type(iter(loader))  # the loader's own iterator, nothing in between
        start = time.perf_counter()
        for _ in range(100_000):
            prof.step()
        assert time.perf_counter() - start < 0.5  # an enabled step() costs ~10 µs: 1 s for these
        assert prof.steps_completed == 0
        assert prof.results() is None and prof.save(tmp_path) is None
    assert not (tmp_path / "results.json").exists()


def _env_disabled(monkeypatch: pytest.MonkeyPatch) -> Profiler:
    monkeypatch.setenv("PERFSCOPE_DISABLE", "1")
    prof = Profiler(nn.Linear(2, 2), device="cpu")
    monkeypatch.delenv("PERFSCOPE_DISABLE")
    return prof


def test_disabled_profiler_imports_nothing_heavy() -> None:
    code = (
        "import sys, perfscope; p = perfscope.Profiler(enabled=False); p.step(); list(p.wrap([1, 2]));"
        "heavy = [m for m in ('scipy', 'perfscope.results', 'perfscope.measure.utilization') if m in sys.modules]; assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_internal_error_becomes_one_warning_and_disables(monkeypatch: pytest.MonkeyPatch) -> None:
    from perfscope.measure import flops

    def broken(self):  # noqa: ANN001
        raise RuntimeError("boom")

    monkeypatch.setattr(flops.StepFlopCounter, "__enter__", broken)
    model, opt = make_model()
    prof = Profiler(model, opt, device="cpu", warmup_steps=2, **quiet())
    batches = list(make_loader(80))
    out = []
    with pytest.warns(RuntimeWarning, match="disabled itself.*boom"):
        for batch in prof.wrap(batches):
            out.append(batch)
            train_step(model, opt, batch)
            prof.step()
    assert len(out) == len(batches) and all(a is b for a, b in zip(out, batches))  # the loop ran to the end
    assert prof.steps_completed == 2  # nothing counted after the failure
    assert prof.results() is None
    from torch._dynamo import eval_frame
    from torch.utils._python_dispatch import _get_current_dispatch_mode

    assert _get_current_dispatch_mode() is None
    assert eval_frame._stance.stance == "default"  # the counted step's force_eager did not outlive the failure


def test_error_while_saving_is_a_warning_not_an_exception(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import perfscope.hooks.results as hook_results

    monkeypatch.setattr(hook_results, "collect_environment", lambda *a, **k: 1 / 0)
    prof = Profiler(device="cpu", warmup_steps=1, **quiet())
    for _ in prof.wrap([torch.zeros(2)] * 4):
        prof.step()
    with pytest.warns(RuntimeWarning, match="ZeroDivisionError"):
        assert prof.save(tmp_path) is None


def test_user_loader_errors_propagate_unchanged() -> None:
    def loader():
        yield torch.zeros(2)
        raise KeyError("user bug")

    prof = Profiler(device="cpu", **quiet())
    with pytest.raises(KeyError, match="user bug"):
        for _ in prof.wrap(loader()):
            prof.step()


def test_user_profiler_is_left_alone() -> None:
    model, opt = make_model()
    prof = Profiler(model, opt, device="cpu", warmup_steps=1, capture_steps=(3, 5), **quiet())
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as user_prof:
        with pytest.warns(RuntimeWarning, match="already running"):
            for batch in prof.wrap(make_loader(80)):
                train_step(model, opt, batch)
                prof.step()
    names = {e.key for e in user_prof.key_averages()}
    assert "aten::addmm" in names  # the user's profiler recorded the whole loop
    m = prof.results().trials[0].metrics
    assert m.unavailable["trace"].code == "trace_not_captured" and m.trace_path is None
    assert [n.code for n in m.unavailable["trace"].params["notes"]] == ["profiler_already_running"]


def test_numerics_and_rng_unchanged(tmp_path: Path) -> None:
    def run(profiled: bool) -> tuple[list[torch.Tensor], torch.Tensor]:
        model, opt = make_model()
        model.insert(1, nn.Dropout(0.2))  # draws from the global RNG every step
        torch.manual_seed(123)
        prof = Profiler(model, opt, device="cpu", warmup_steps=2, enabled=profiled, sample_utilization=False)
        for batch in prof.wrap(make_loader(96)):
            train_step(model, opt, batch)
            prof.step()
        prof.save(tmp_path / str(profiled))  # measures the matmul ceiling with random matrices
        return [p.detach().clone() for p in model.parameters()], torch.rand(4)

    plain_params, plain_next = run(False)
    hooked_params, hooked_next = run(True)
    assert all(torch.equal(a, b) for a, b in zip(plain_params, hooked_params))
    assert torch.equal(plain_next, hooked_next)  # the user's RNG stream continues as if never profiled


def test_save_writes_loadable_results(tmp_path: Path) -> None:
    model, opt = make_model()
    prof = Profiler(model, opt, device="cpu", warmup_steps=2, name="tiny", sample_utilization=True,
                    utilization_interval_s=0.01, measure_ceiling=False, precision="fp32")
    for batch in prof.wrap(make_loader(200)):
        train_step(model, opt, batch)
        time.sleep(0.002)
        prof.step()
    path = prof.save(tmp_path / "run")
    assert path == tmp_path / "run" / "results.json"
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]
    results = Results.load(path)
    trial = results.trials[0]
    assert results.source == "hooks" and results.workload.name == "tiny"
    assert trial.name == "baseline" and trial.status == "ok"
    assert trial.config.precision == "fp32" and trial.config.device == "cpu"
    assert results.workload.parameter_count == sum(p.numel() for p in model.parameters())
    m = trial.metrics
    assert m.memory_breakdown is not None and m.memory_breakdown.optimizer_state > 0
    assert m.peak_memory_bytes and m.utilization is not None and m.utilization.cpu_percent is not None
    assert results.peak is None  # no datasheet, no measured ceiling, no override: unknown, not guessed
    assert m.mfu is None and "mfu" in m.unavailable
    prof.step()  # after the final save the profiler is closed: no-op, no error
    assert prof.steps_completed == 25


def test_results_survive_the_new_tf32_api(tmp_path: Path) -> None:
    """torch >= 2.9: after `fp32_precision = "tf32"`, reading the legacy allow_tf32 raises; the profiler must still
    save its results and record the user's TF32 setting."""
    matmul = torch.backends.cuda.matmul
    saved_new, saved_legacy = matmul.fp32_precision, bool(matmul.allow_tf32)
    matmul.fp32_precision = "tf32"
    try:
        model, opt = make_model()
        prof = Profiler(model, opt, device="cpu", warmup_steps=1, **quiet())
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)  # the profiler disables itself with a RuntimeWarning
            for batch in prof.wrap(make_loader(40)):
                train_step(model, opt, batch)
                prof.step()
            path = prof.save(tmp_path / "run")
        assert Results.load(path).trials[0].config.tf32 is True
    finally:
        matmul.allow_tf32 = saved_legacy
        matmul.fp32_precision = saved_new


def test_invalid_arguments_are_rejected() -> None:
    with pytest.raises(ValueError, match="warmup_steps"):
        Profiler(warmup_steps=0)
    with pytest.raises(ValueError, match="capture_steps"):
        Profiler(capture_steps=(5, 5))
    with pytest.raises(ValueError, match="precision"):
        Profiler(precision="int8")
    with pytest.raises(ValueError, match="gather_timeout_s"):
        Profiler(gather_timeout_s=0)


def test_exported_from_the_package() -> None:
    assert perfscope.Profiler is Profiler


# ------------------------------------------------------------------- pauses and framework callbacks


def _run(prof: Profiler, steps: int, *, between=None, accum: int = 1, batch_hooks: bool = False) -> None:
    """A loop without wrap(): the way a framework adapter drives the profiler (batch_begin, micro_step, step).
    ``between(i)`` runs after step i's boundary, before the next batch: where a framework evaluates or saves."""
    model, opt = prof.model, prof.optimizer
    batches = iter(make_loader(BATCH * steps * accum))
    for i in range(steps):
        for _ in range(accum):
            batch = next(batches)
            if batch_hooks:
                prof.batch_begin()
            prof.micro_step(BATCH)
            F.cross_entropy(model(batch[0]), batch[1]).backward()
        opt.step()
        opt.zero_grad()
        prof.step()
        if between is not None:
            between(i)


def _evaluate(model: nn.Module) -> None:
    with torch.no_grad():
        model(torch.randn(64, IN))  # forward FLOPs that are not a training step's


def test_the_flop_count_starts_at_batch_begin_not_at_the_step_boundary() -> None:
    """What a framework runs after a step's end (here an evaluation) is not in the next step's count."""
    model, opt = make_model()
    prof = Profiler(model, opt, device="cpu", warmup_steps=1, **quiet())
    _run(prof, 6, between=lambda i: _evaluate(model), batch_hooks=True)
    assert prof.results().trials[0].metrics.flops_per_step == mlp_flops(BATCH)
    # Without batch_begin() the count starts at the boundary, and an evaluation after it is counted (the failure mode).
    model, opt = make_model()
    prof = Profiler(model, opt, device="cpu", warmup_steps=1, **quiet())
    _run(prof, 6, between=lambda i: _evaluate(model))
    assert prof.results().trials[0].metrics.flops_per_step > mlp_flops(BATCH)


def test_a_pause_inside_the_counted_step_moves_the_count_to_the_next_step() -> None:
    model, opt = make_model()
    prof = Profiler(model, opt, device="cpu", warmup_steps=1, **quiet())

    def evaluate_after(i: int) -> None:
        if i == 0:  # the boundary of step 1, the FLOP-counting step: its count has started (no batch_begin)
            with prof.paused("evaluation"):
                _evaluate(model)

    _run(prof, 8, between=evaluate_after)
    m = prof.results().trials[0].metrics
    assert m.flops_per_step == mlp_flops(BATCH)
    assert any(note.code == "flops_counted_again" for note in m.flop_notes)


def test_a_pause_between_micro_batches_drops_that_step_from_the_timings() -> None:
    """Timing a step from a resume in its middle would credit it with all its samples for half its time."""
    model, opt = make_model()
    prof = Profiler(model, opt, device="cpu", warmup_steps=1, count_flops=False, **quiet())
    batches = iter(make_loader(BATCH * 2 * 8))
    for i in range(8):
        for micro in range(2):
            batch = next(batches)
            prof.batch_begin()
            prof.micro_step(BATCH)
            F.cross_entropy(model(batch[0]), batch[1]).backward()
            if i == 4 and micro == 0:
                with prof.paused("evaluation"):
                    time.sleep(0.01)
        opt.step()
        opt.zero_grad()
        prof.step()
    m = prof.results().trials[0].metrics
    assert m.steps == 8 - 1 - 1  # warm-up, and step 4 that the evaluation split
    assert [w.steps for w in m.windows] == [3, 3]  # steps 1-3, then 5-7
    assert m.samples_per_step == 2 * BATCH and m.excluded_s["evaluation"] > 0


def test_pauses_are_reported_apart_by_reason() -> None:
    model, opt = make_model()
    prof = Profiler(model, opt, device="cpu", warmup_steps=1, count_flops=False, **quiet())

    def pauses(i: int) -> None:
        if i in (2, 4):
            prof.pause("evaluation")
            time.sleep(0.02)
            prof.pause("checkpoint saving")  # the checkpoint the evaluation triggers
            time.sleep(0.01)
            prof.resume()

    _run(prof, 8, between=pauses)
    results = prof.results()
    m = results.trials[0].metrics
    assert set(m.excluded_s) == {"evaluation", "checkpoint saving"}
    assert m.excluded_s["evaluation"] >= 2 * 0.02 and m.excluded_s["checkpoint saving"] >= 2 * 0.01
    assert m.excluded_s["evaluation"] + m.excluded_s["checkpoint saving"] < results.trials[0].wall_time_s - m.wall_s
    assert [w.steps for w in m.windows] == [2, 2, 3]
    (not_timed,) = [n for n in results.notes if n.code == "not_timed"]
    assert not_timed.params["excluded"]["evaluation"] == 2 and set(not_timed.params["spent"]) == set(m.excluded_s)


def test_exclude_since_step_excludes_work_reported_once_done() -> None:
    """The Trainer reports evaluation at its end (on_evaluate): the time since the step's end is excluded."""
    model, opt = make_model()
    prof = Profiler(model, opt, device="cpu", warmup_steps=1, count_flops=False, **quiet())

    def evaluation(i: int) -> None:
        if i == 3:
            time.sleep(0.05)
            prof.exclude_since_step("evaluation")

    _run(prof, 8, between=evaluation, batch_hooks=True)
    m = prof.results().trials[0].metrics
    assert m.excluded_s["evaluation"] >= 0.05
    assert [w.steps for w in m.windows] == [3, 4]  # the step in which it was reported is timed from then on


def test_every_time_the_hooks_read_is_the_injected_clocks() -> None:
    """Profiler(clock=...) is the one seam: step boundaries, data waits, pauses and the run's wall time are all read on
    it, so a loop on simulated time gives exact figures (nothing the machine really takes leaks in)."""
    from tests.integrations.workloads import SimulatedTime

    time_ = SimulatedTime(now=100.0)
    model, opt = make_model()
    prof = Profiler(model, opt, device="cpu", warmup_steps=1, count_flops=False, clock=time_.clock(), **quiet())
    batches = iter(make_loader(BATCH * 6))
    for i in range(6):
        prof.data_begin()
        time_.spend(0.25)  # the fetch
        batch = next(batches)
        prof.data_end()
        prof.batch_begin()
        prof.micro_step(BATCH)
        train_step(model, opt, batch)
        time_.spend(0.5)  # the step's compute
        prof.step()
        if i == 2:
            with prof.paused("evaluation"):
                time_.spend(2.0)
    results = prof.results()
    m = results.trials[0].metrics
    assert [w.steps for w in m.windows] == [2, 3]  # steps 1-2, the evaluation, steps 3-5
    assert m.step_times_s == [0.75] * 5 and m.step_data_wait_s == [0.25] * 5
    assert m.wall_s == 3.75 and m.samples_per_s == 5 * BATCH / 3.75 and m.data_wait_share == 1 / 3
    assert m.excluded_s == {"evaluation": 2.0}
    assert results.trials[0].wall_time_s == 6 * 0.75 + 2.0  # from the Profiler's creation, on the same clock
    assert m.first_step_s == 0.5  # from step 0's batch_begin() to its end


def test_framework_fetches_are_data_wait() -> None:
    model, opt = make_model()
    prof = Profiler(model, opt, device="cpu", warmup_steps=1, count_flops=False, **quiet())
    batches = iter(make_loader(BATCH * 6))
    for _ in range(6):
        prof.data_begin()
        time.sleep(0.01)
        batch = next(batches)
        prof.data_end()
        prof.batch_begin()
        prof.micro_step(BATCH)
        train_step(model, opt, batch)
        prof.step()
    m = prof.results().trials[0].metrics
    assert "data_wait_share" not in m.unavailable
    assert len(m.step_data_wait_s) == m.steps and all(w >= 0.01 for w in m.step_data_wait_s)


def test_describe_records_what_a_framework_knows() -> None:
    model, opt = make_model()
    prof = Profiler(model, opt, device="cpu", warmup_steps=1, count_flops=False, **quiet())
    prof.describe(precision="bf16", activation_checkpointing=True, declared={"strategy": "DDPStrategy", "nothing": None})
    with pytest.raises(ValueError, match="not TrialConfig fields"):
        prof.describe(strategy="ddp")
    _run(prof, 4)
    results = prof.results()
    trial = results.trials[0]
    assert trial.config.precision == "bf16" and trial.config.activation_checkpointing is True
    assert "activation_checkpointing" not in trial.unknown_settings and "precision" not in trial.unknown_settings
    assert results.workload.declared["strategy"] == "DDPStrategy"
    assert "nothing" not in results.workload.declared and "tokens_per_sample" not in results.workload.declared



@pytest.mark.parametrize("set_stance", [True, False], ids=["torch>=2.6", "older-torch"])
def test_a_loop_described_as_compiled(monkeypatch: pytest.MonkeyPatch, set_stance: bool) -> None:
    """A framework that compiles the model (TrainingArguments(torch_compile=True)) hides its graphs from the counter:
    counted eagerly where torch.compiler.set_stance exists, else no FLOP count, said why."""
    import perfscope.hooks.observe as observe

    monkeypatch.setattr(observe, "eager_counting_available", lambda: set_stance)
    model, opt = make_model()
    prof = Profiler(model, opt, device="cpu", warmup_steps=1, **quiet())
    prof.describe(compile="default")
    _run(prof, 4, batch_hooks=True)
    m = prof.results().trials[0].metrics
    if set_stance:
        assert m.flops_per_step == mlp_flops(BATCH)
    else:
        assert m.flops_per_step is None and m.unavailable["flops_per_step"].code == "compiled_flops_unseen"


# ------------------------------------------------------------------------------------------ adapters


def _fake_module(monkeypatch: pytest.MonkeyPatch, name: str, **attrs: object) -> None:
    module = types.ModuleType(name)
    for key, value in attrs.items():
        setattr(module, key, value)
    monkeypatch.setitem(sys.modules, name, module)


def test_adapters_explain_a_missing_framework(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "transformers", None)  # makes `import transformers` fail
    monkeypatch.delitem(sys.modules, "perfscope.hooks.integrations.huggingface", raising=False)
    with pytest.raises(ImportError, match="pip install transformers"):
        import perfscope.hooks.integrations.huggingface  # noqa: F401


class FakeTraceCapture:
    """The interface perfscope.trial.loop uses: a context manager with step(), total_steps, path, note."""

    instances: list[FakeTraceCapture] = []

    def __init__(self, trace_dir: Path, *, device: str, **window: int) -> None:
        self.target, self.device, self.steps, self.total_steps = Path(trace_dir) / "rank0.json.gz", device, 0, 2
        self.window = window
        self.path: Path | None = None
        self.note: str | None = None
        self.active = 2
        FakeTraceCapture.instances.append(self)

    def __enter__(self) -> FakeTraceCapture:
        assert torch.autograd._profiler_enabled() is False
        return self

    def step(self) -> None:
        self.steps += 1

    def __exit__(self, *exc: object) -> None:
        self.target.write_bytes(b"trace")
        self.path = self.target


def test_capture_window_is_profiled_untimed_and_saved(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    FakeTraceCapture.instances.clear()
    _fake_module(monkeypatch, "perfscope.trace.capture", TraceCapture=FakeTraceCapture)
    monkeypatch.setattr(build, "trace_facts", lambda *a, **k: 1 / 0)  # the fake trace cannot be analysed
    prof = Profiler(device="cpu", warmup_steps=2, capture_steps=(2, 5), memory=True, trace_dir=tmp_path / "tmp", **quiet())
    for _ in prof.wrap([torch.zeros(4)] * 12):
        prof.step()
    (cap,) = FakeTraceCapture.instances
    assert cap.steps == 4  # step 1 (the profiler's warm-up), then the window: steps 2, 3, 4
    assert cap.window == {"first_step": 1, "wait": 0, "warmup": 1, "active": 3, "memory": False}
    path = prof.save(tmp_path / "run")
    results = Results.load(path)
    m = results.trials[0].metrics
    # warm-up, the window, its two memory-by-category steps, the FLOP step (moved after them)
    assert m.steps == 12 - 2 - 3 - 2 - 1 and m.memory_categories is not None
    trace = tmp_path / "run" / m.trace_path  # stored relative to the results file: the folder can move
    assert not Path(m.trace_path).is_absolute() and trace.read_bytes() == b"trace"
    assert "trace_facts" in m.unavailable  # its analysis failed: the facts only are lost


def test_memory_peaks_are_read_before_the_ceiling_probe_allocates(monkeypatch: pytest.MonkeyPatch) -> None:
    """The matmul-ceiling probe allocates ~768 MiB on a GPU: read in the user's process before the peaks, it
    would become the reported peak (issue 11 #7)."""
    from perfscope.measure import environment

    order: list[str] = []
    real_collect = environment.collect_environment
    from perfscope.hooks import results as hooks_results

    real_peaks = hooks_results.memory_peaks
    monkeypatch.setattr(hooks_results, "memory_peaks", lambda device: order.append("peaks") or real_peaks(device))
    monkeypatch.setattr(hooks_results, "collect_environment", lambda *a, **k: order.append("probe") or real_collect(*a, **{**k, "measure_ceiling": False}))
    model, opt = make_model()
    prof = Profiler(model, opt, device="cpu", warmup_steps=1, count_flops=False, measure_ceiling=True, sample_utilization=False)
    for batch in prof.wrap(make_loader(40)):
        train_step(model, opt, batch)
        prof.step()
    prof.results()
    assert order[:2] == ["peaks", "probe"]
