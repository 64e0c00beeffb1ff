"""PerfscopeCallback in a real Lightning Trainer: perfscope's figures against the test's own wall clock.

Each test runs a tiny MLP through `trainer.fit` with perfscope's callback and a second callback that keeps the
test's own record (when each optimizer step ended, what was evaluation or checkpoint saving). Throughput is
compared over the same steps of the same run, so a loaded machine moves both figures alike.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

pl = pytest.importorskip("lightning.pytorch")

from perfscope.hooks.integrations.lightning import PerfscopeCallback  # noqa: E402
from perfscope.results import Results  # noqa: E402
from perfscope.wording import words  # noqa: E402
from tests.integrations.workloads import (  # noqa: E402
    HIDDEN,
    SIMULATED_COMPUTE_S,
    SIMULATED_STALL_S,
    Points,
    SimulatedTime,
    WallClock,
    load,
    mlp,
    mlp_flops,
    visible_text,
)

BATCH = 32
WARMUP = 2
QUIET = dict(warmup_steps=WARMUP, measure_ceiling=False, sample_utilization=False, peak_tflops=1.0)
WIDE = 8192
"""Hidden width where pauses are tested: the step after a pause starts at the fetch for perfscope and at the dataset
for the test, a sliver apart; with a step this long, a neighbour's process landing in that sliver stays negligible."""


class Classifier(pl.LightningModule):
    """``simulated``: each training step spends SIMULATED_COMPUTE_S of that simulated time."""

    def __init__(self, hidden: int = HIDDEN, simulated: SimulatedTime | None = None) -> None:
        super().__init__()
        self.net = mlp(hidden)
        self.simulated = simulated

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        self.log("loss", loss)
        if self.simulated is not None:
            self.simulated.spend(SIMULATED_COMPUTE_S)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", F.cross_entropy(self.net(x), y))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


class Clock(pl.Callback):
    """The test's wall-clock record; registered after perfscope's callback, so its hooks run just after."""

    def __init__(self, simulated: SimulatedTime | None = None) -> None:
        self.clock = WallClock()
        self.simulated = simulated  # on simulated time, also when each optimizer step ended there
        self._step = 0

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        self.clock.batch_start(int(batch[0].shape[0]))

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if trainer.global_step != self._step:
            self._step = trainer.global_step
            self.clock.step_end(self._step)
            if self.simulated is not None:
                self.simulated.marks[self._step] = self.simulated.now
        else:
            self.clock.batch_end()

    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        if not trainer.sanity_checking:
            self.clock.start_pause()

    def on_save_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict[str, Any]) -> None:
        self.clock.start_pause()

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        self.clock.end_pause()  # the validation after the last step (on_train_end would come after perfscope's save)


def loader(n: int, *, stall: bool = False, workers: int = 0, clock: WallClock | None = None,
           simulated: SimulatedTime | None = None) -> torch.utils.data.DataLoader:
    dataset = Points(n, stall=stall, on_fetch=clock.fetch if clock is not None and not workers else None, simulated=simulated)
    return torch.utils.data.DataLoader(dataset, batch_size=BATCH, num_workers=workers)


def fit(tmp_path: Path, callback: PerfscopeCallback, *, steps: int, val: bool = False, train_n: int = 8192,
        stall: bool = False, workers: int = 0, hidden: int = HIDDEN, simulated: SimulatedTime | None = None,
        **trainer_kwargs: Any) -> WallClock:
    """``simulated``: the fit on that simulated time (perfscope's callback must read it: clock=simulated.clock()),
    each training step spending SIMULATED_COMPUTE_S of it and the loader's stalls (no workers) their own."""
    clock = Clock(simulated)
    kwargs: dict[str, Any] = dict(
        max_steps=steps, accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
        enable_model_summary=False, enable_checkpointing=False, default_root_dir=tmp_path / "lightning",
    )
    kwargs.update(trainer_kwargs)
    trainer = pl.Trainer(callbacks=[callback, clock], **kwargs)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*(does not have many workers|LeafSpec|is deprecated).*")
        trainer.fit(Classifier(hidden, simulated), loader(train_n, stall=stall, workers=workers, clock=clock.clock, simulated=simulated),
                    loader(256) if val else None)
    return clock.clock


def test_a_plain_fit_matches_the_wall_clock_and_reads_the_trainer(tmp_path: Path) -> None:
    cb = PerfscopeCallback(tmp_path / "run", **QUIET)
    clock = fit(tmp_path, cb, steps=30)
    results = load(cb)
    trial = results.trials[0]
    m = trial.metrics
    assert m is not None
    first = WARMUP + 1  # the warm-up steps, then the FLOP-counting step, are not timed
    assert (m.steps, m.samples_per_step, m.grad_accum_steps) == (30 - first, BATCH, 1)
    assert m.samples_per_s == pytest.approx(clock.samples_per_s(first, 30), rel=0.05)
    assert m.flops_per_step == mlp_flops(BATCH)
    assert m.mfu is not None and m.mfu <= 1 and not m.flags
    assert m.first_step_s is not None
    assert "data_wait_share" not in m.unavailable and m.step_data_wait_s
    assert trial.config.precision == "fp32" and "precision" not in trial.unknown_settings
    assert trial.config.num_workers == 0 and "num_workers" not in trial.unknown_settings
    declared = results.workload.declared
    assert declared["strategy"] == "SingleDeviceStrategy" and declared["devices"] == 1
    assert declared["lightning_precision"].startswith("32-true")
    assert declared["data_wait"].startswith("Lightning's fetch timing")
    # The report shows what is absent as absent, never a Python None or a rounded-away rate.
    text = visible_text((tmp_path / "run" / "report.html").read_text())
    assert "None" not in text and "0.0 TFLOP/s" not in text and "tokens_per_sample" not in text
    assert re.search(r"\d TFLOP/s achieved", text)


def test_gradient_accumulation_is_one_step_of_micro_steps(tmp_path: Path) -> None:
    cb = PerfscopeCallback(tmp_path / "run", **QUIET)
    clock = fit(tmp_path, cb, steps=20, accumulate_grad_batches=2)
    results = load(cb)
    m = results.trials[0].metrics
    assert m is not None
    assert (m.steps, m.grad_accum_steps, m.samples_per_step, m.micro_batch_size) == (20 - WARMUP - 1, 2, 2 * BATCH, BATCH)
    assert m.flops_per_step == 2 * mlp_flops(BATCH)
    assert m.samples_per_s == pytest.approx(clock.samples_per_s(WARMUP + 1, 20), rel=0.05)
    assert results.workload.declared["accumulate_grad_batches"] == 2


def test_bf16_mixed_is_recorded_as_bf16_autocast(tmp_path: Path) -> None:
    cb = PerfscopeCallback(tmp_path / "run", **QUIET)
    clock = fit(tmp_path, cb, steps=16, precision="bf16-mixed")
    results = load(cb)
    trial = results.trials[0]
    m = trial.metrics
    assert m is not None
    assert trial.config.precision == "bf16"
    assert results.workload.declared["lightning_precision"] == "bf16-mixed: bf16 autocast"
    assert m.fingerprint is not None and m.fingerprint.matmul_flops_by_dtype.get("bf16", 0) > 0  # autocast ran
    assert m.flops_per_step == mlp_flops(BATCH)
    assert m.samples_per_s == pytest.approx(clock.samples_per_s(WARMUP + 1, 16), rel=0.05)


def test_evaluation_and_checkpoints_are_neither_steps_nor_flops(tmp_path: Path) -> None:
    """val_check_interval=5 with a checkpoint after each validation: the FLOP count is a training step's, the
    validation and saving time is reported apart, and the steps around it are timed without it."""
    cb = PerfscopeCallback(tmp_path / "run", **QUIET)
    clock = fit(tmp_path, cb, steps=30, val=True, val_check_interval=5, enable_checkpointing=True, hidden=WIDE)
    results = load(cb)
    m = results.trials[0].metrics
    assert m is not None
    assert m.flops_per_step == mlp_flops(BATCH, WIDE)  # not the 8× of a count that contains a validation loop
    assert m.mfu is not None and m.mfu <= 1 and not m.flags
    assert set(m.excluded_s) == {"evaluation", "checkpoint saving"}
    assert sum(m.excluded_s.values()) == pytest.approx(clock.paused_s(), rel=0.15)
    assert m.samples_per_s == pytest.approx(clock.samples_per_s(WARMUP + 1, 30), rel=0.05)
    assert len(m.windows) > 1  # each pause ends a window
    assert any(re.search(r"evaluation \(6 ×, .* of wall time\)", note) for note in map(words, results.notes))


def test_validation_inside_an_accumulation_step_moves_the_flop_count(tmp_path: Path) -> None:
    """Lightning checks validation every N *batches*: with accumulate_grad_batches=2 and val_check_interval=3 it runs
    between the two micro-batches of a step. The count that contains it is dropped and taken on the next step."""
    cb = PerfscopeCallback(tmp_path / "run", **{**QUIET, "warmup_steps": 1})
    clock = fit(tmp_path, cb, steps=24, val=True, val_check_interval=3, accumulate_grad_batches=2, hidden=WIDE)
    results = load(cb)
    m = results.trials[0].metrics
    assert m is not None
    assert m.flops_per_step == 2 * mlp_flops(BATCH, WIDE)
    assert any(note.code == "flops_counted_again" for note in m.flop_notes)
    assert m.samples_per_s == pytest.approx(clock.samples_per_s(3, 24), rel=0.05)


def test_a_stalling_loader_sets_the_throughput_and_is_not_blamed_on_gc(tmp_path: Path) -> None:
    """A real Lightning fit on simulated time: every 256th sample's load stalls 1/8 s (one batch in eight, in the
    main process: a worker's time would not be the test's), every training step computes 1/64 s, and nothing else
    Lightning does takes any time. The throughput is samples over wall time (not batch / median step), the tail is
    the data wait's, measured through Lightning's fetch hooks; the figures are exact, whatever the load."""
    simulated = SimulatedTime()
    cb = PerfscopeCallback(tmp_path / "run", clock=simulated.clock(), **QUIET)
    fit(tmp_path, cb, steps=64, stall=True, simulated=simulated)
    results = load(cb)
    m = results.trials[0].metrics
    assert m is not None and m.typical_step is not None
    first, last = WARMUP + 1, 64  # the warm-up steps, then the FLOP-counting step, are not timed
    start, end = simulated.marks[first], simulated.marks[last]
    stalls = simulated.stalls_between(start, end)
    assert stalls >= 7, "the fixture should stall"  # one timed step in eight
    wall = (last - first) * SIMULATED_COMPUTE_S + stalls * SIMULATED_STALL_S
    assert (m.steps, m.wall_s) == (last - first, wall) and end - start == wall
    assert m.samples_per_s == (last - first) * BATCH / wall  # every step's samples over the whole wall, stalls included
    assert m.data_wait_share == stalls * SIMULATED_STALL_S / wall  # exactly the stalls' share
    assert (m.typical_step.median, m.typical_step.max) == (SIMULATED_COMPUTE_S, SIMULATED_COMPUTE_S + SIMULATED_STALL_S)
    assert m.samples_per_s < 0.5 * BATCH / m.typical_step.median  # far below the batch over the median step
    assert "PS602" not in {f.rule_id for f in results.findings}  # the slow steps waited for data: not the collector


def test_a_second_fit_gets_its_own_folder(tmp_path: Path) -> None:
    cb = PerfscopeCallback(tmp_path / "run", **QUIET)
    fit(tmp_path, cb, steps=12)
    first = (tmp_path / "run" / "results.json").read_bytes()
    fit(tmp_path, cb, steps=16)
    assert (tmp_path / "run" / "results.json").read_bytes() == first  # never overwritten
    one, two = Results.load(tmp_path / "run" / "results.json"), load(cb)
    assert cb.saved == tmp_path / "run" / "fit-2" / "results.json"
    assert (one.trials[0].metrics.steps, two.trials[0].metrics.steps) == (12 - WARMUP - 1, 16 - WARMUP - 1)  # type: ignore[union-attr]
    assert "fit #2" in two.workload.declared["fit"]
    # Another callback into the same folder in this process is a further fit, not an overwrite either.
    other = PerfscopeCallback(tmp_path / "run", **QUIET)
    fit(tmp_path, other, steps=12)
    assert other.saved == tmp_path / "run" / "fit-3" / "results.json"


class Crashing(Classifier):
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if batch_idx == 12:
            raise RuntimeError("boom")
        return super().training_step(batch, batch_idx)


def test_a_failed_fit_keeps_what_was_measured(tmp_path: Path) -> None:
    cb = PerfscopeCallback(tmp_path / "run", **QUIET)
    trainer = pl.Trainer(max_steps=30, accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                         enable_model_summary=False, enable_checkpointing=False, callbacks=[cb])
    with pytest.raises(RuntimeError, match="boom"):
        trainer.fit(Crashing(), loader(4096))
    m = load(cb).trials[0].metrics
    assert m is not None and m.steps == 12 - WARMUP - 1  # the steps before the failure; the failed one is dropped


@pytest.mark.slow
def test_ddp_on_cpu_writes_the_jobs_results(tmp_path: Path) -> None:
    """Two processes (strategy="ddp", gloo): rank 0 writes one results.json with both ranks, each rank's
    throughput its own, the job's all their samples over the slowest window."""
    script = Path(__file__).with_name("lightning_ddp_fit.py")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2]), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, str(script), str(tmp_path)], env=env, capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    assert [p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("results.json")] == ["run/results.json"]
    results = Results.load(tmp_path / "run" / "results.json")
    m = results.trials[0].metrics
    assert m is not None and m.distributed is not None
    declared = results.workload.declared
    assert (declared["strategy"], declared["world_size"], declared["process_group_backend"]) == ("DDPStrategy", 2, "gloo")
    assert m.samples_per_step == BATCH and m.flops_per_step == mlp_flops(BATCH)  # per rank
    truths = [float((tmp_path / f"truth{rank}.txt").read_text()) for rank in (0, 1)]
    assert [r.rank for r in m.distributed.ranks] == [0, 1]
    for rank, truth in zip(m.distributed.ranks, truths):
        assert rank.samples_per_s == pytest.approx(truth, rel=0.05)
    assert m.samples_per_s == pytest.approx(2 * min(truths), rel=0.05)  # equal samples: 2 × the slowest rank's rate
