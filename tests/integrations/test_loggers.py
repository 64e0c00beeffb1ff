"""perfscope's figures in TensorBoard, W&B (offline) and MLflow (a local file store), read back with each library's
own reader: TensorBoard's EventAccumulator, the W&B run's summary and history, MLflow's client.

Decided on counts (one point per interval of `every` timed steps, plus the run's figures at save()) and on equality
with results.json (the figures logged at save() are the run's own), never on wall time.
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from perfscope.hooks.loggers import NAMES, Loggers
from perfscope.hooks.profiler import Profiler
from perfscope.results import Results

QUIET = {"measure_ceiling": False, "sample_utilization": False, "peak_tflops": 1.0, "live": False, "device": "cpu"}
WARMUP, TIMED, EVERY = 2, 12, 4


def train(loggers: Any, out: Path) -> Results:
    """A tiny loop, WARMUP + TIMED steps (the FLOP-counting step among them is not timed), saved into ``out``."""
    torch.manual_seed(0)
    model = nn.Linear(16, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    prof = Profiler(model, opt, warmup_steps=WARMUP, loggers=Loggers(loggers, every=EVERY), **QUIET)
    batches = [(torch.randn(8, 16), torch.randint(0, 4, (8,))) for _ in range(WARMUP + TIMED)]
    for x, y in prof.wrap(batches):
        F.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad()
        prof.step()
    assert prof.save(out) is not None
    return Results.load(out / "results.json")


def expected_final(results: Results) -> dict[str, float]:
    m = results.trials[0].metrics
    assert m is not None
    return {"perfscope/step_time_s": m.wall_s / m.steps, "perfscope/samples_per_s": m.samples_per_s,
            "perfscope/data_wait_share": m.data_wait_share, "perfscope/mfu": m.mfu,
            "perfscope/peak_memory_bytes": float(m.peak_memory_bytes)}


def intervals(results: Results) -> int:
    return results.trials[0].metrics.steps // EVERY


def test_tensorboard_event_files_hold_perfscopes_scalars(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(tmp_path / "tb"))
    results = train([writer], tmp_path / "out")
    writer.close()
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {f"perfscope/{n}" for n in NAMES if n != "exposed_comm_s"} <= tags  # one process: no collectives
    assert "perfscope/exposed_comm_s" not in tags
    times = events.Scalars("perfscope/step_time_s")
    assert len(times) == intervals(results) + 1  # each interval, then the run's own figures at save()
    assert all(a.step < b.step for a, b in itertools.pairwise(times))
    for tag, value in expected_final(results).items():
        assert events.Scalars(tag)[-1].value == pytest.approx(value, rel=1e-6)  # float32 in the event file
    assert all(0 <= s.value <= 1 for s in events.Scalars("perfscope/data_wait_share"))


def test_wandb_offline_run_gets_them_on_a_perfscope_step_axis(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wandb = pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    run = wandb.init(project="perfscope-test", dir=str(tmp_path), mode="offline")
    try:
        run.log({"loss": 1.0}, step=0)  # the user's own step counter
        results = train([run], tmp_path / "out")
        run.log({"loss": 0.5}, step=1, commit=True)  # still accepted: perfscope never advanced it
        for tag, value in expected_final(results).items():
            assert run.summary[tag] == pytest.approx(value)
        assert run.summary["perfscope/step"] == WARMUP + TIMED
        assert run.summary["loss"] == 0.5
    finally:
        run.finish()


def test_mlflow_local_store_gets_a_metric_history(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mlflow = pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 keeps the file store behind this switch
    monkeypatch.setenv("MLFLOW_TRACKING_URI", (tmp_path / "mlruns").as_uri())  # not set_tracking_uri(): no global left
    with mlflow.start_run() as active:
        results = train(["mlflow"], tmp_path / "out")
    client = MlflowClient()
    history = client.get_metric_history(active.info.run_id, "perfscope/step_time_s")
    assert len(history) == intervals(results) + 1
    assert max(h.step for h in history) == WARMUP + TIMED
    for tag, value in expected_final(results).items():
        last = max(client.get_metric_history(active.info.run_id, tag), key=lambda h: h.step)
        assert math.isclose(last.value, value, rel_tol=1e-9)


def test_a_failing_logger_is_dropped_with_one_warning(tmp_path: Path) -> None:
    class Broken:
        def add_scalar(self, *args: Any, **kwargs: Any) -> None:
            raise OSError("No space left on device")

        def flush(self) -> None: ...

    with pytest.warns(RuntimeWarning, match="stopped logging to TensorBoard after an error: OSError") as seen:
        results = train([Broken()], tmp_path / "out")
    assert results.trials[0].ok and len([w for w in seen if "stopped logging" in str(w.message)]) == 1


def test_an_unknown_logger_is_refused_naming_what_is_accepted() -> None:
    with pytest.raises(TypeError, match="pass a SummaryWriter, a wandb Run"):
        Loggers([object()])


def scalars(log_dir: Path, tag: str) -> list[Any]:
    from tensorboard.backend.event_processing.event_multiplexer import EventMultiplexer

    events = EventMultiplexer()  # every run (event-file folder) below log_dir, as TensorBoard shows them
    events.AddRunsFromDirectory(str(log_dir))
    events.Reload()
    return [e for run, tags in events.Runs().items() if tag in tags.get("scalars", []) for e in events.Scalars(run, tag)]


def test_the_lightning_callback_writes_to_the_trainers_tensorboard_logger(tmp_path: Path) -> None:
    pytest.importorskip("lightning")
    from lightning.pytorch.loggers import TensorBoardLogger

    from perfscope.hooks.integrations.lightning import PerfscopeCallback
    from tests.integrations.test_lightning import fit

    callback = PerfscopeCallback(tmp_path / "out", warmup_steps=2, live=False, **{k: QUIET[k] for k in ("measure_ceiling",
                                                                                                          "sample_utilization")})
    fit(tmp_path, callback, steps=60, logger=TensorBoardLogger(str(tmp_path / "tb")))
    results = Results.load(callback.saved)
    times = scalars(tmp_path / "tb", "perfscope/step_time_s")
    assert len(times) == results.trials[0].metrics.steps // 50 + 1  # every 50 timed steps, and the run at save()
    assert times[-1].value == pytest.approx(results.trials[0].metrics.wall_s / results.trials[0].metrics.steps, rel=1e-6)


def test_the_huggingface_callback_writes_where_report_to_tensorboard_does(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    from perfscope.hooks.integrations.huggingface import PerfscopeTrainerCallback
    from tests.integrations.test_huggingface import train

    callback = PerfscopeTrainerCallback(tmp_path / "out", warmup_steps=2, live=False,
                                        **{k: QUIET[k] for k in ("measure_ceiling", "sample_utilization")})
    train(tmp_path, callback, steps=8, report_to=["tensorboard"])
    results = Results.load(callback.saved)
    times = scalars(tmp_path / "hf" / "runs", "perfscope/step_time_s")  # TensorBoard pointed at the Trainer's runs
    assert len(times) == 1  # fewer than 50 timed steps: the run's own figures at save() only
    assert times[0].value == pytest.approx(results.trials[0].metrics.wall_s / results.trials[0].metrics.steps, rel=1e-6)
    assert scalars(tmp_path / "hf" / "runs", "train/loss")  # the Trainer's own, beside them
