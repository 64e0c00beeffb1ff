"""`perfscope trace PATH`: a trace the user already has → results.json and a report, nothing run.

End to end through the CLI on perfscope-written traces (tests/data/traces), a hooks-written run folder, synthetic
two-rank gloo traces with and without a straggler, and the real A100 traces of HTA's test data (skipped with the
reason where they are absent: set PERFSCOPE_PUBLIC_TRACES). Every bad input is exit 2 with one line naming the file.
"""

from __future__ import annotations

import gzip
import html
import json
import shutil
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from perfscope.cli import main
from perfscope.report.view import TRACE_LEAD
from perfscope.results import Results, msg
from perfscope.rules import run_rules
from perfscope.rules._text import TRACE_ESTIMATE
from perfscope.trace.communication import communication_facts
from perfscope.trace.offline import trace_results, trace_stragglers
from tests.public_traces import public_folder, public_trace

TRACES = Path(__file__).parent / "data" / "traces"
CPU = TRACES / "cpu_only" / "mlp_data_wait.json.gz"
LAUNCH_BOUND = TRACES / "cuda" / "h100_fp32_launch_bound.json.gz"
GLOO_DDP = TRACES / "gloo" / "ddp"


def run_trace(path: Path, out: Path, *extra: str) -> int:
    return main(["trace", str(path), "--out", str(out), *extra])


def profiler_steps_s(path: Path) -> list[float]:
    """ProfilerStep#N durations read straight from the file: what the step times must be."""
    with gzip.open(path, "rt") as fh:
        events = json.load(fh)["traceEvents"]
    steps = {e["name"]: e["dur"] / 1e6 for e in events
             if e.get("ph") == "X" and e.get("cat") in ("user_annotation", "cpu_op")
             and e.get("name", "").startswith("ProfilerStep#")}
    return [steps[k] for k in sorted(steps, key=lambda name: int(name.split("#")[1]))]


# ----------------------------------------------------------------------------------------- perfscope-written traces


def test_cpu_trace_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_trace(CPU, tmp_path / "out") == 0
    printed = capsys.readouterr().out
    results = Results.load(tmp_path / "out" / "results.json")
    assert results.source == "trace" and results.environment.device_type == "cpu"
    m = results.trials[0].metrics
    assert m is not None and m.trace_facts is not None
    assert m.step_times_s == pytest.approx(profiler_steps_s(CPU))  # measured: the trace's own steps
    assert m.wall_s == pytest.approx(sum(m.step_times_s))
    assert m.samples_per_s is None and m.unavailable["samples_per_s"].code == "trace_no_samples"  # unknown, said why
    assert m.mfu is None and m.unavailable["mfu"].code == "trace_no_flops"
    assert results.findings and all(TRACE_ESTIMATE in f.evidence for f in results.findings)
    md = (tmp_path / "out" / "report.md").read_text()
    page = html.unescape((tmp_path / "out" / "report.html").read_text())
    assert TRACE_LEAD in md and TRACE_LEAD in page
    summary = md.split("## Ranked fixes")[0]
    assert "| MFU |" not in summary and "| Throughput |" not in summary  # no row a trace cannot fill
    assert "Step time" in summary
    assert m.micro_batch_size == 0 and "unknown (not in a trace)" in md  # the trials table prints no batch of 0
    first = next(line for line in md.splitlines() if line.startswith("### 1. "))  # the report's first ranked fix
    assert printed.startswith(f"Top finding: {first.removeprefix('### 1. ')}") and "\n# perfscope report: mlp_data_wait" in printed and TRACE_LEAD in printed
    again = tmp_path / "again.md"  # results.json alone re-renders the same trace report anywhere
    assert main(["report", str(tmp_path / "out" / "results.json"), "--format", "md", "-o", str(again)]) == 0
    assert TRACE_LEAD in again.read_text()


def test_cuda_trace_reads_device_and_datasheet(tmp_path: Path) -> None:
    assert run_trace(LAUNCH_BOUND, tmp_path / "out") == 0
    results = Results.load(tmp_path / "out" / "results.json")
    env = results.environment
    assert env.device_type == "cuda" and env.device_name == "NVIDIA H100 80GB HBM3"
    assert env.compute_capability == "9.0" and env.multiprocessor_count == 132
    assert env.datasheet_peaks_tflops["bf16"] == pytest.approx(989.4)
    launch = next(f for f in results.findings or [] if f.rule_id == "PS301")
    assert launch.evidence[0] == TRACE_ESTIMATE and "nothing was measured" in (launch.estimate_method or "")
    assert "Peak: datasheet fp32 66.9, tf32 494.7, bf16 989.4" in (tmp_path / "out" / "report.md").read_text()


def test_gloo_ddp_folder_per_rank(tmp_path: Path) -> None:
    assert run_trace(GLOO_DDP, tmp_path / "out") == 0
    results = Results.load(tmp_path / "out" / "results.json")
    d = results.trials[0].metrics.distributed  # type: ignore[union-attr]
    assert d is not None and d.world_size == 2 and d.backend == "gloo"
    assert [r.rank for r in d.ranks] == [0, 1]
    for r in d.ranks:
        comm = communication_facts(GLOO_DDP / f"rank{r.rank}.json.gz", rank=r.rank, device_type="cpu", steps=1, world_size=2)
        assert r.exposed_collective_s_per_step == pytest.approx(comm.exposed_collective_s)
        assert r.step_times_s == pytest.approx(profiler_steps_s(GLOO_DDP / f"rank{r.rank}.json.gz"))
    md = (tmp_path / "out" / "report.md").read_text()
    table = md.split("## Distributed")[1]
    assert "| 0" in table and "| 1" in table and "Exposed / step" in table
    assert "node(s) ×" not in table  # the layout a trace does not record is not made up
    assert d.stragglers == [] and "Stragglers: each rank's mean traced step minus its exposed collective time" in table
    assert "2 ranks, 3 traced steps each" in table


def test_hooks_written_run_folder(tmp_path: Path) -> None:
    """A run folder the hooks wrote (results.json beside trace/rank0.json.gz) is read through its trace/."""
    from perfscope import Profiler

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    prof = Profiler(model, opt, device="cpu", warmup_steps=2, capture_steps=(2, 5), measure_ceiling=False,
                    sample_utilization=False, peak_tflops=1.0)
    for _ in range(10):  # 0-1 warm-up (1: the profiler's), 2-4 traced, 5 FLOP-counting, 6-9 timed
        x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))
        F.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad()
        prof.step()
    prof.save(tmp_path / "run")
    prof.close()
    assert (tmp_path / "run" / "trace" / "rank0.json.gz").is_file()
    assert run_trace(tmp_path / "run", tmp_path / "out") == 0
    results = Results.load(tmp_path / "out" / "results.json")
    m = results.trials[0].metrics
    assert m is not None and m.steps == len(m.step_times_s) == 3  # the captured steps 2..4


def test_ranks_from_file_order_without_distributed_info(tmp_path: Path) -> None:
    folder = tmp_path / "traces"
    folder.mkdir()
    for name in ("a.json.gz", "b.json.gz"):
        shutil.copy(CPU, folder / name)
    results = trace_results(folder)
    d = results.trials[0].metrics.distributed  # type: ignore[union-attr]
    assert d is not None and [r.rank for r in d.ranks] == [0, 1]
    assert msg("rank_from_file_order", files=["a.json.gz", "b.json.gz"]) in results.notes


def test_steps_option_for_a_trace_without_profiler_steps(tmp_path: Path) -> None:
    trace = tmp_path / "nosteps.json"
    trace.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 400, "pid": 1, "tid": 1},
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "ts": 500, "dur": 500, "pid": 1, "tid": 1},
    ]}))
    assert run_trace(trace, tmp_path / "one") == 0  # without --steps: one window, said so (not refused)
    one = Results.load(tmp_path / "one" / "results.json")
    assert one.trials[0].metrics.steps == 1 and msg("rank_note", rank=0, note=msg("whole_span_as_steps", steps=1)) in one.notes
    assert run_trace(trace, tmp_path / "out", "--steps", "2") == 0
    m = Results.load(tmp_path / "out" / "results.json").trials[0].metrics
    assert m is not None and m.steps == 2 and m.wall_s == pytest.approx(1e-3) and "step_times_s" in m.unavailable


def test_findings_are_labelled_only_for_a_trace(tmp_path: Path) -> None:
    results = trace_results(CPU)
    assert all(TRACE_ESTIMATE in f.evidence for f in run_rules(results))
    results.source = "analyze"
    assert run_rules(results) and not any(TRACE_ESTIMATE in f.evidence for f in run_rules(results))


# ----------------------------------------------------------------------------------------- stragglers across ranks


def gloo_rank(rank: int, compute_ms: list[float], wait_ms: list[float], comm_ms: float = 1.0) -> dict:
    """A CPU rank's trace: per step an aten op (its compute) then a gloo all-reduce on the gloo thread that lasts
    its own communication plus the wait for the slower peer."""
    events, t = [], 0.0
    for i, (compute, wait) in enumerate(zip(compute_ms, wait_ms)):
        step = (compute + wait + comm_ms) * 1e3
        events += [
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "ts": t, "dur": step, "pid": 1, "tid": 1},
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": t, "dur": compute * 1e3, "pid": 1, "tid": 1},
            {"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", "ts": t + compute * 1e3,
             "dur": (wait + comm_ms) * 1e3, "pid": 1, "tid": 2},
        ]
        t += step
    return {"traceEvents": events, "distributedInfo": {"rank": rank, "world_size": 2, "backend": "gloo"}}


def write_job(folder: Path, slow: list[float], fast: list[float]) -> Path:
    folder.mkdir()
    step = [max(a, b) for a, b in zip(slow, fast)]
    for rank, compute in ((0, slow), (1, fast)):
        (folder / f"rank{rank}.json").write_text(json.dumps(gloo_rank(rank, compute, [s - c for s, c in zip(step, compute)])))
    return folder


def test_a_straggling_rank_is_named(tmp_path: Path) -> None:
    folder = write_job(tmp_path / "job", slow=[20.0, 20.4, 19.8, 20.2, 20.1], fast=[10.0, 10.3, 9.9, 10.1, 10.2])
    assert run_trace(folder, tmp_path / "out") == 0
    results = Results.load(tmp_path / "out" / "results.json")
    d = results.trials[0].metrics.distributed  # type: ignore[union-attr]
    assert [s.rank for s in d.stragglers] == [0] and d.stragglers[0].slower_by == pytest.approx(0.9, abs=0.1)
    finding = next(f for f in results.findings or [] if f.rule_id == "PS802")
    assert finding.evidence[0] == TRACE_ESTIMATE and any("5 traced steps" in e for e in finding.evidence)
    assert "few steps" in d.straggler_method


def test_balanced_ranks_have_no_straggler(tmp_path: Path) -> None:
    folder = write_job(tmp_path / "job", slow=[10.0, 10.4, 9.8, 10.2, 10.1], fast=[10.1, 10.3, 9.9, 10.0, 10.2])
    d = trace_results(folder).trials[0].metrics.distributed  # type: ignore[union-attr]
    assert d is not None and d.stragglers == [] and "2 ranks, 5 traced steps" in d.straggler_method


def test_too_few_steps_are_not_tested() -> None:
    found, method = trace_stragglers({0: [0.2, 0.21], 1: [0.1, 0.11]})
    assert found == [] and method.startswith("not tested") and "rank 0: 2" in method


# ----------------------------------------------------------------------------------------- bad input: exit 2, one line


def _truncated_gzip(path: Path) -> None:
    path.write_bytes(CPU.read_bytes()[: CPU.stat().st_size // 2])


BAD_INPUTS = {
    "empty.json": (lambda p: p.write_bytes(b""), "empty file (0 bytes)"),
    "cut.json.gz": (_truncated_gzip, "truncated gzip"),
    "plain.json.gz": (lambda p: p.write_text('{"traceEvents": []}'), "not a valid gzip file"),
    "text.json": (lambda p: p.write_text("hello, not json"), "not JSON"),
    "other.json": (lambda p: p.write_text('{"schema_version": 2, "trials": []}'), "JSON of another shape"),
    "number.json": (lambda p: p.write_text("42"), "JSON of another shape"),
    "instant.json": (lambda p: p.write_text('{"traceEvents": [{"ph": "i", "ts": 1, "name": "x"}]}'), "no complete"),
    "broken.json": (lambda p: p.write_text('{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "gemm", "ts": NaN, '
                                           '"dur": 5, "pid": 1, "tid": 1}]}'), "1 with a NaN timestamp or duration"),
}


@pytest.mark.parametrize("name", sorted(BAD_INPUTS))
def test_bad_trace_file_exits_2_naming_it(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write, what = BAD_INPUTS[name]
    path = tmp_path / name
    write(path)
    assert run_trace(path, tmp_path / "out") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(path) in err and what in err
    assert not (tmp_path / "out" / "results.json").exists()


def test_bad_file_inside_a_folder_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "ranks"
    folder.mkdir()
    shutil.copy(CPU, folder / "rank0.json.gz")
    _truncated_gzip(folder / "rank1.json.gz")
    assert run_trace(folder, tmp_path / "out") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(folder / "rank1.json.gz") in err and "truncated gzip" in err


def test_out_in_the_trace_folder_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A hooks run folder's own results.json is never replaced by the trace's."""
    run = tmp_path / "run"
    (run / "trace").mkdir(parents=True)
    shutil.copy(CPU, run / "trace" / "rank0.json.gz")
    (run / "results.json").write_text("{}")
    assert run_trace(run, run) == 2 and run_trace(run / "trace", run) == 2
    assert capsys.readouterr().err.count("the folder of the traces") == 2
    assert (run / "results.json").read_text() == "{}"


@pytest.mark.parametrize("case", ["empty folder", "missing", "duplicate rank"])
def test_bad_paths_exit_2(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "traces"
    if case == "empty folder":
        path.mkdir()
        (path / "notes.txt").write_text("not a trace")
    elif case == "duplicate rank":
        path.mkdir()
        for name in ("x.json.gz", "y.json.gz"):
            shutil.copy(GLOO_DDP / "rank0.json.gz", path / name)
    assert run_trace(path, tmp_path / "out") == 2
    err = capsys.readouterr().err.strip()
    expected = {"empty folder": "no trace files", "missing": "no such file", "duplicate rank": "two traces of rank 0"}[case]
    assert len(err.splitlines()) == 1 and str(path) in err and expected in err


# ----------------------------------------------------------------------------------------- real A100 traces (HTA)


def test_real_a100_nccl_rank(tmp_path: Path) -> None:
    trace = public_trace("nccl_parser_config/nccl_data")
    assert run_trace(trace, tmp_path / "out") == 0
    results = Results.load(tmp_path / "out" / "results.json")
    assert results.environment.device_name == "NVIDIA A100-PG509-200"
    assert results.environment.datasheet_peaks_tflops["bf16"] == pytest.approx(312.0)
    m = results.trials[0].metrics
    assert m is not None and len(m.step_times_s) == 3
    d = m.distributed
    assert d is not None and d.world_size == 2 and d.backend == "nccl" and [r.rank for r in d.ranks] == [0]
    comm = communication_facts(trace, rank=0, device_type="cuda", steps=1, world_size=2)
    assert d.ranks[0].exposed_collective_s_per_step == pytest.approx(comm.exposed_collective_s) and comm.exposed_collective_s > 0
    md = (tmp_path / "out" / "report.md").read_text()
    assert "## Distributed" in md and "Exposed / step" in md
    assert msg("ranks_traced", traced=1, world=2) in results.notes


def test_real_two_ranks_of_a_128_rank_job(tmp_path: Path) -> None:
    folder = public_folder("trace_filter")
    assert run_trace(folder, tmp_path / "out") == 0
    results = Results.load(tmp_path / "out" / "results.json")
    d = results.trials[0].metrics.distributed  # type: ignore[union-attr]
    assert d is not None and d.world_size == 128 and [r.rank for r in d.ranks] == [0, 1]
    assert all(r.exposed_collective_s_per_step and r.exposed_collective_s_per_step > 0 for r in d.ranks)
    env = results.environment
    assert env.device_name == "unknown GPU" and env.unavailable["device_name"].code == "trace_no_device_properties"
    md = (tmp_path / "out" / "report.md").read_text()
    table = md.split("## Distributed")[1].split("## Trials")[0]
    assert table.count("| 0") + table.count("| 1 ") >= 2 and msg("ranks_traced", traced=2, world=128) in results.notes
    assert "Stragglers: not tested" in table  # 2 traced steps a rank
