"""Every trace folder perfscope writes opens in Holistic Trace Analysis as it is (issue 17 #5).

HTA loads every *.json / *.gz file of a folder as one rank's trace, reads the rank from distributedInfo and the
steps from ProfilerStep#N. On a CPU trace its kernel analyses have nothing to read; what it does read — ranks,
profiler steps, the ops of one step (TraceDiff) — is asserted here, and the README's recipe runs verbatim.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest
import torch
from torch import nn

from perfscope.cli import main
from perfscope.hooks import Profiler
from perfscope.results import Results

pytest.importorskip("hta")
from hta.trace_analysis import TraceAnalysis  # noqa: E402
from hta.trace_diff import DeviceType, TraceDiff  # noqa: E402

ROOT = Path(__file__).parent.parent
RANK_FILE = re.compile(r"rank\d+\.json\.gz")


def _trace_folders(out: Path) -> list[Path]:
    """Every folder under ``out`` that holds a trace, found by looking, not by knowing the layout."""
    return sorted({p.parent for p in out.rglob("*.gz")} | {p.parent for p in out.rglob("*.json") if "traceEvents" in p.read_text()[:4096]})


def _load(folder: Path, caplog: pytest.LogCaptureFixture) -> TraceAnalysis:
    assert all(RANK_FILE.fullmatch(p.name) for p in folder.iterdir()), f"{folder} holds more than traces"
    with caplog.at_level(logging.WARNING):
        analyzer = TraceAnalysis(trace_dir=str(folder), include_last_profiler_step=True)
    assert "distributedInfo" not in caplog.text  # HTA found the rank in the file, it did not guess
    assert analyzer.t.get_ranks() == [0]
    assert analyzer.t.meta_data[0]["distributedInfo"] == {"backend": None, "rank": 0, "world_size": 1}
    return analyzer


def _step_ops(control: Path, test: Path, step: int) -> object:
    return TraceDiff.compare_traces(str(control), str(test), control_rank=0, test_rank=0, control_iteration=step,
                                    test_iteration=step, device_type=DeviceType.CPU)


def test_hooks_trace_folder_loads_in_hta_with_training_step_numbers(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    prof = Profiler(model, opt, device="cpu", warmup_steps=2, capture_steps=(10, 13), sample_utilization=False,
                    measure_ceiling=False)
    for x in prof.wrap([torch.randn(8, 16) for _ in range(16)]):
        model(x).sum().backward()
        opt.step()
        opt.zero_grad()
        prof.step()
    prof.save(tmp_path / "run")
    folders = _trace_folders(tmp_path / "run")
    assert folders == [tmp_path / "run" / "trace"]
    analyzer = _load(folders[0], caplog)
    assert analyzer.get_profiler_steps() == [10, 11, 12]
    ops = _step_ops(folders[0], folders[0], 11)  # one step's ops, as HTA attributes them to that step
    assert ops.loc["aten::addmm", "Control_counts"] == 2 and ops.loc["ProfilerStep#11", "Control_counts"] == 1


@pytest.mark.slow
def test_every_analyze_trace_folder_loads_in_hta_and_the_readme_recipe_runs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    out, new = tmp_path / "perfscope-out", tmp_path / "perfscope-new"  # the same code twice, as the README's recipe
    for folder in (out, new):
        assert main(["analyze", str(ROOT / "tests" / "workloads" / "mlp.py"), "--device", "cpu", "--out", str(folder),
                     "--steps", "8", "--warmup", "2", "--no-sweep"]) == 0
    results = Results.load(out / "results.json")
    traced = {t.name: out / t.metrics.trace_path for t in results.trials if t.metrics and t.metrics.trace_path}
    folders = _trace_folders(out)
    assert folders == sorted(p.parent for p in traced.values()) and folders  # one folder per traced run
    assert not list(out.glob("*.gz"))
    for folder in folders + _trace_folders(new):
        steps = _load(folder, caplog).get_profiler_steps()
        # 2 warm-up + 8 timed + 1 structure-counting step = 11 done; then the profiler's wait and warm-up steps.
        assert steps == [13, 14, 15], folder
    ops = _step_ops(out / "trials" / "baseline" / "trace", new / "trials" / "baseline" / "trace", 13)
    assert (ops["diff_counts"] == 0).all() and ops.loc["aten::addmm", "Test_counts"] == 2  # same code, same ops

    monkeypatch.chdir(tmp_path)  # the README's recipe, verbatim, against this output folder
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("### Profiler traces in Perfetto and HTA"):]
    recipe = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    scope: dict[str, object] = {}
    exec(compile(recipe, "README.md", "exec"), scope)  # noqa: S102 - the documented commands, as a user runs them
    assert scope["steps"] == [13, 14, 15]
    assert scope["ops"].loc["aten::addmm", "Control_counts"] == 2
