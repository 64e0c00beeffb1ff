"""PerfscopeTrainerCallback in a real `transformers.Trainer`: perfscope's figures against the test's own wall clock.

A two-layer GPT-2 built from a config (nothing downloaded) trains on random tokens. A second callback keeps the
test's own record of the run (when each optimizer step ended, how long evaluation and saving took, as the
Trainer reports them), and throughput is compared over the same steps of the same run.
"""

from __future__ import annotations

import copy
import re
import time
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")

from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments  # noqa: E402

from perfscope.hooks.integrations.huggingface import PerfscopeTrainerCallback  # noqa: E402
from perfscope.measure.flops import count_step  # noqa: E402
from perfscope.wording import words  # noqa: E402
from tests.integrations.workloads import (  # noqa: E402
    SIMULATED_COMPUTE_S,
    SIMULATED_STALL_S,
    STALL_S,
    SimulatedTime,
    WallClock,
    load,
    visible_text,
)

BATCH, SEQ, VOCAB = 8, 32, 256
WARMUP = 2
QUIET = dict(warmup_steps=WARMUP, measure_ceiling=False, sample_utilization=False, peak_tflops=1.0)


class Tokens(torch.utils.data.Dataset):
    """Random token sequences; with ``stall_every=k``, every k-th sample takes 60 ms to load, or (``simulated``)
    every k-th sample loaded stalls that simulated time (the Trainer shuffles: the count of loads, not the index,
    decides, so every k-th batch of a step's fetch stalls)."""

    def __init__(self, n: int, *, stall_every: int | None = None, simulated: SimulatedTime | None = None) -> None:
        self.ids = torch.randint(0, VOCAB, (n, SEQ), generator=torch.Generator().manual_seed(0))
        self.stall_every = stall_every
        self.simulated = simulated
        self.loads = 0

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        self.loads += 1
        if self.simulated is not None:
            if self.stall_every and self.loads % self.stall_every == 0:
                self.simulated.stall()
        elif self.stall_every and i % self.stall_every == self.stall_every - 1:
            time.sleep(STALL_S)
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def tiny_gpt2() -> GPT2LMHeadModel:
    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=VOCAB, n_positions=SEQ, bos_token_id=0, eos_token_id=0)
    return GPT2LMHeadModel(config)


def training_step_flops(accum: int = 1) -> float:
    """The model FLOPs of one optimizer step, counted on a copy of the model outside any Trainer."""
    model = tiny_gpt2()
    ids = Tokens(BATCH).ids
    counted = count_step(copy.deepcopy(model), {"input_ids": ids, "labels": ids}, lambda m, b: m(**b).loss)
    return accum * counted.total


class Clock(TrainerCallback):
    """The test's wall-clock record, registered after perfscope's callback (and, on simulated time, when each
    optimizer step ended there)."""

    def __init__(self, samples_per_step: int, simulated: SimulatedTime | None = None) -> None:
        self.clock = WallClock()
        self.samples_per_step = samples_per_step
        self.simulated = simulated

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.clock.step_end(state.global_step, self.samples_per_step)
        if self.simulated is not None:
            self.simulated.marks[state.global_step] = self.simulated.now

    def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.clock.pause_done()

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.clock.pause_done()


def train(tmp_path: Path, callback: PerfscopeTrainerCallback, *, steps: int, n: int = 4096, stall_every: int | None = None,
          accum: int = 1, simulated: SimulatedTime | None = None, **args: Any) -> WallClock:
    """``simulated``: the run on that simulated time (perfscope's callback must read it: clock=simulated.clock()),
    each micro-batch's forward spending SIMULATED_COMPUTE_S of it and the loader's stalls their own."""
    clock = Clock(BATCH * accum, simulated)
    defaults: dict[str, Any] = dict(
        output_dir=str(tmp_path / "hf"), max_steps=steps, per_device_train_batch_size=BATCH, per_device_eval_batch_size=BATCH,
        gradient_accumulation_steps=accum, use_cpu=True, report_to=[], disable_tqdm=True, save_strategy="no",
        logging_steps=5, seed=0,
    )
    model = tiny_gpt2()
    if simulated is not None:
        model.register_forward_pre_hook(lambda module, inputs: simulated.spend(SIMULATED_COMPUTE_S))
    trainer = Trainer(model=model, args=TrainingArguments(**{**defaults, **args}),
                      train_dataset=Tokens(n, stall_every=stall_every, simulated=simulated), eval_dataset=Tokens(4 * BATCH),
                      callbacks=[callback, clock])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.train()
    return clock.clock


def test_a_plain_run_matches_the_wall_clock_and_reads_the_arguments(tmp_path: Path) -> None:
    cb = PerfscopeTrainerCallback(tmp_path / "run", **QUIET)
    clock = train(tmp_path, cb, steps=20)
    results = load(cb)
    trial = results.trials[0]
    m = trial.metrics
    assert m is not None
    first = WARMUP + 1
    assert (m.steps, m.samples_per_step, m.grad_accum_steps) == (20 - first, BATCH, 1)
    assert m.samples_per_s == pytest.approx(clock.samples_per_s(first, 20), rel=0.05)
    assert m.flops_per_step == pytest.approx(training_step_flops(), rel=0.01)
    assert m.mfu is not None and m.mfu <= 1 and not m.flags
    assert m.tokens_per_s == pytest.approx(m.samples_per_s * SEQ)  # input_ids never varied in length
    assert trial.config.precision == "fp32" and trial.config.activation_checkpointing is False
    assert "activation_checkpointing" not in trial.unknown_settings and "num_workers" not in trial.unknown_settings
    declared = results.workload.declared
    assert declared["framework"].startswith("transformers ") and declared["parallel_mode"] == "not_parallel"
    text = visible_text((tmp_path / "run" / "report.html").read_text())
    assert "None" not in text and "0.0 TFLOP/s" not in text
    assert re.search(r"\d TFLOP/s achieved", text)


def test_gradient_accumulation_is_one_step_of_micro_steps(tmp_path: Path) -> None:
    cb = PerfscopeTrainerCallback(tmp_path / "run", **QUIET)
    clock = train(tmp_path, cb, steps=12, accum=2)
    m = load(cb).trials[0].metrics
    assert m is not None
    assert (m.steps, m.grad_accum_steps, m.samples_per_step) == (12 - WARMUP - 1, 2, 2 * BATCH)
    assert m.flops_per_step == pytest.approx(training_step_flops(accum=2), rel=0.01)
    assert m.samples_per_s == pytest.approx(clock.samples_per_s(WARMUP + 1, 12), rel=0.05)


def test_bf16_is_recorded_as_bf16_autocast(tmp_path: Path) -> None:
    cb = PerfscopeTrainerCallback(tmp_path / "run", **QUIET)
    clock = train(tmp_path, cb, steps=12, bf16=True)
    results = load(cb)
    m = results.trials[0].metrics
    assert m is not None
    assert results.trials[0].config.precision == "bf16"
    assert results.workload.declared["hf_precision"].startswith("bf16 autocast")
    assert m.fingerprint is not None and m.fingerprint.matmul_flops_by_dtype.get("bf16", 0) > 0
    assert m.samples_per_s == pytest.approx(clock.samples_per_s(WARMUP + 1, 12), rel=0.05)


def test_evaluation_and_saving_are_neither_steps_nor_flops(tmp_path: Path) -> None:
    """eval_steps=5 and save_steps=5: the FLOP count is a training step's, evaluation and saving are apart."""
    cb = PerfscopeTrainerCallback(tmp_path / "run", **QUIET)
    clock = train(tmp_path, cb, steps=20, eval_strategy="steps", eval_steps=5, save_strategy="steps", save_steps=5)
    results = load(cb)
    m = results.trials[0].metrics
    assert m is not None
    assert m.flops_per_step == pytest.approx(training_step_flops(), rel=0.10)
    assert m.mfu is not None and m.mfu <= 1 and not m.flags
    assert set(m.excluded_s) == {"evaluation", "checkpoint saving"}
    assert sum(m.excluded_s.values()) == pytest.approx(clock.paused_s(), rel=0.15)
    assert m.samples_per_s == pytest.approx(clock.samples_per_s(WARMUP + 1, 20), rel=0.05)
    assert any(re.search(r"evaluation \(4 ×, .* of wall time\)", note) for note in map(words, results.notes))


def test_a_stalling_loader_sets_the_throughput_and_is_not_blamed_on_gc(tmp_path: Path) -> None:
    """A real Trainer on simulated time: every fourth batch's fetch stalls 1/8 s (in the main process), every step's
    forward computes 1/64 s, and nothing else the Trainer does takes any time. The wait is measured in the gap
    before on_step_begin, where the Trainer fetches a step's batches; the figures are exact, whatever the load."""
    simulated = SimulatedTime()
    cb = PerfscopeTrainerCallback(tmp_path / "run", clock=simulated.clock(), **QUIET)
    train(tmp_path, cb, steps=40, stall_every=4 * BATCH, simulated=simulated)
    results = load(cb)
    m = results.trials[0].metrics
    assert m is not None and m.typical_step is not None
    first, last = WARMUP + 1, 40  # the warm-up steps, then the FLOP-counting step, are not timed
    start, end = simulated.marks[first], simulated.marks[last]
    stalls = simulated.stalls_between(start, end)
    assert stalls >= 8, "the fixture should stall"  # about one timed step in four
    wall = (last - first) * SIMULATED_COMPUTE_S + stalls * SIMULATED_STALL_S
    assert (m.steps, m.wall_s) == (last - first, wall) and end - start == wall
    assert m.samples_per_s == (last - first) * BATCH / wall  # every step's samples over the whole wall, stalls included
    assert m.data_wait_share == stalls * SIMULATED_STALL_S / wall  # exactly the stalls' share
    assert (m.typical_step.median, m.typical_step.max) == (SIMULATED_COMPUTE_S, SIMULATED_COMPUTE_S + SIMULATED_STALL_S)
    assert m.samples_per_s < 0.5 * BATCH / m.typical_step.median  # far below the batch over the median step
    assert "PS602" not in {f.rule_id for f in results.findings}  # the slow steps waited for data: not the collector


def test_samples_are_counted_from_the_batches_a_short_one_included(tmp_path: Path) -> None:
    """100 samples in batches of 8: each epoch ends on a batch of 4, which per_device_train_batch_size would overcount."""
    cb = PerfscopeTrainerCallback(tmp_path / "run", **QUIET)
    train(tmp_path, cb, steps=26, n=100)  # two epochs of 13 steps; steps 13 and 26 hold 4 samples
    m = load(cb).trials[0].metrics
    assert m is not None
    assert sum(w.samples or 0 for w in m.windows) == (26 - WARMUP - 1 - 2) * BATCH + 2 * 4


def test_a_second_train_gets_its_own_folder(tmp_path: Path) -> None:
    cb = PerfscopeTrainerCallback(tmp_path / "run", **QUIET)
    train(tmp_path, cb, steps=8)
    first = (tmp_path / "run" / "results.json").read_bytes()
    train(tmp_path, cb, steps=10)
    assert (tmp_path / "run" / "results.json").read_bytes() == first
    assert cb.saved == tmp_path / "run" / "fit-2" / "results.json"
    assert load(cb).trials[0].metrics.steps == 10 - WARMUP - 1  # type: ignore[union-attr]
