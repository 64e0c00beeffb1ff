"""The hooks read what the loop really runs: precision, torch.compile, data waits (issue 24, items 1 and 4).

The compiled loops use backend="aot_eager": inductor's C++ compile takes ~20 s on this 2-core machine, and what is
tested here — the model is an OptimizedModule, its frames are dynamo's, the counted step must run it eagerly to
count FLOPs — is the same for every backend (the mode read from inductor's options has its own unit test).
"""

from __future__ import annotations

import gzip
import json
import warnings
from collections import Counter
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import perfscope.hooks.observe as observe
from perfscope.hooks.observe import Observation, compile_mode, compile_state, observed_settings, precision_from
from perfscope.hooks.profiler import DATA_SPAN, Profiler
from perfscope.results import KernelStat, Results
from perfscope.results.messages import msg
from perfscope.rules import run_rules
from perfscope.trace.categories import categorize
from perfscope.trace.facts import DATA_LABEL
from perfscope.wording import words
from tests.rules.test_rules import _facts, _results

IN, HIDDEN, OUT, BATCH = 32, 64, 16, 8


class Net(nn.Module):
    """An MLP with a chain of elementwise ops (the work torch.compile fuses)."""

    def __init__(self) -> None:
        super().__init__()
        self.up, self.down = nn.Linear(IN, HIDDEN), nn.Linear(HIDDEN, OUT)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.up(x)
        h = F.gelu(h) * torch.sigmoid(h) + torch.tanh(h)
        return self.down(h)


def _loader(n: int = 96) -> torch.utils.data.DataLoader:
    g = torch.Generator().manual_seed(1)
    ds = torch.utils.data.TensorDataset(torch.randn(n, IN, generator=g), torch.randint(0, OUT, (n,), generator=g))
    return torch.utils.data.DataLoader(ds, batch_size=BATCH)


def _run_loop(tmp_path: Path, *, bf16: bool, compiled: bool, capture: bool = False) -> Results:
    """The user's loop, profiled with no precision= and no describe(): everything the profiler knows it observed."""
    torch.manual_seed(0)
    net = Net()
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
    model = torch.compile(net, backend="aot_eager") if compiled else net
    prof = Profiler(model, opt, device="cpu", warmup_steps=2, measure_ceiling=False, sample_utilization=False,
                    peak_tflops=1.0, capture_steps=(3, 5) if capture else None, trace_dir=tmp_path / "trace")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for x, y in prof.wrap(_loader()):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                loss = F.cross_entropy(model(x).float(), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            prof.step()
    assert [str(w.message) for w in caught] == []  # the counted step warns nothing in the user's loop
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert prof.save(tmp_path / "out") is not None
    return Results.load(tmp_path / "out" / "results.json")


def _as_if_on_an_h100(results: Results) -> Results:
    """The same facts on a GPU with tensor cores: where PS101/PS102 would fire (they stay silent on a CPU)."""
    env = results.environment
    env.device_type, env.compute_capability = "cuda", "9.0"
    env.datasheet_peaks_tflops = {"fp32": 66.9, "bf16": 989.4}
    return results


def _as_if_elementwise_bound(results: Results) -> Results:
    """The same loop with its trace's kernel time 70% elementwise: where PS303 (compile to fuse) fires. The real
    share of this tiny MLP's microsecond CPU ops moves with load (a preemption lands in whichever op runs)."""
    kernels = results.trials[0].metrics.trace_facts.kernels
    kernels.time_by_category = {"elementwise": 0.7, "gemm": 0.3}
    kernels.top = []
    return results


def _rule_ids(results: Results) -> set[str]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # CPU facts read as a GPU's: rules that need GPU-only facts may warn
        return {f.rule_id for f in run_rules(results)}


# ------------------------------------------------------------------------------------------ whole loops


def test_bf16_autocast_compiled_loop_is_recorded_as_such_and_not_told_to_turn_them_on(tmp_path: Path) -> None:
    results = _run_loop(tmp_path, bf16=True, compiled=True, capture=True)
    trial = results.trials[0]
    assert trial.config.precision == "bf16" and "precision" not in trial.unknown_settings
    assert trial.config.compile == "default" and "compile" not in trial.unknown_settings
    m = trial.metrics
    assert m.flops_per_step and m.flops_per_step > 0 and m.mfu is not None  # counted on the eager module underneath
    assert m.fingerprint.matmul_dtype_shares() == {"bf16": 1.0}
    assert any("force_eager" in words(n) for n in m.flop_notes)  # the eager count's note is still words
    assert "bf16" in results.workload.declared["observed_precision"]
    assert "autocast bf16" in results.workload.declared["observed_precision"]
    assert m.trace_facts is not None
    assert not _rule_ids(_as_if_elementwise_bound(_as_if_on_an_h100(results))) & {"PS101", "PS102", "PS303"}


def test_plain_fp32_loop_is_observed_as_fp32_and_still_advised(tmp_path: Path) -> None:
    """The control: the same loop without autocast or compile gets the advice the compiled bf16 loop must not."""
    results = _run_loop(tmp_path, bf16=False, compiled=False, capture=True)
    trial = results.trials[0]
    assert trial.config.precision == "fp32" and "precision" not in trial.unknown_settings
    assert trial.config.compile is None
    assert "no autocast" in results.workload.declared["observed_precision"]
    assert {"PS101", "PS102"} <= _rule_ids(_as_if_on_an_h100(results))
    assert "PS303" in _rule_ids(_as_if_elementwise_bound(results))  # an eager loop is told to compile


def test_wrap_marks_each_next_with_a_data_span_in_the_trace(tmp_path: Path) -> None:
    assert DATA_SPAN == DATA_LABEL  # the label trace facts book as data wait
    results = _run_loop(tmp_path, bf16=False, compiled=False, capture=True)
    m = results.trials[0].metrics
    spans, steps = _data_spans(tmp_path / "out" / m.trace_path)
    assert steps and len(spans) >= len(steps)  # one next() per profiled step at least (the warm-up step's too)
    for step in steps:  # each profiled step holds its own next()
        assert any(step["ts"] <= s["ts"] <= step["ts"] + step["dur"] for s in spans)
    assert m.trace_facts.data_wait_fraction > 0


def _data_spans(trace_path: Path) -> tuple[list[dict], list[dict]]:
    with gzip.open(trace_path, "rt") as f:
        events = json.load(f)["traceEvents"]
    spans = [e for e in events if e.get("name") == DATA_LABEL and e.get("ph") == "X"]
    steps = [e for e in events if str(e.get("name", "")).startswith("ProfilerStep#") and e.get("ph") == "X"]
    return spans, steps


def test_a_frameworks_fetch_hooks_mark_data_spans_too(tmp_path: Path) -> None:
    """data_begin()/data_end() (Lightning's fetch hooks) label the fetch in the trace as wrap() labels next()."""
    net = Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    prof = Profiler(net, opt, device="cpu", warmup_steps=1, measure_ceiling=False, sample_utilization=False,
                    peak_tflops=1.0, capture_steps=(2, 4), trace_dir=tmp_path)
    batches = iter(_loader())
    for _ in range(6):
        prof.data_begin()
        x, y = next(batches)
        prof.data_end()
        prof.batch_begin()
        F.cross_entropy(net(x), y).backward()
        opt.step()
        prof.step(BATCH)
    prof.close()
    spans, steps = _data_spans(tmp_path / "rank0.json.gz")
    assert steps and len(spans) == len(steps)


# ------------------------------------------------------------------------------------------ the probes


def test_precision_from_matmul_dtypes_and_autocast() -> None:
    assert precision_from({"bf16": 90.0, "fp32": 10.0}, {}).value == "bf16"
    assert precision_from({"fp16": 60.0, "fp32": 40.0}, {}).value == "fp16"
    assert precision_from({"fp32": 60.0, "bf16": 40.0}, {}).value == "fp32"
    assert precision_from({"fp64": 1.0}, {}).known is False  # none of a run's three precisions
    no_matmul = precision_from({}, Counter(bf16=2), "autocast bf16 at 2 of 2 forwards")
    assert no_matmul.value == "bf16" and no_matmul.known
    assert precision_from({}, Counter(off=3)).known is False  # nothing says which precision: not fp32 by default


def test_observed_settings_never_default_what_was_not_seen() -> None:
    assert observed_settings(None, None, Observation(None, "?", known=False)) == ({}, ["precision", "compile"])
    assert observed_settings(None, Observation("bf16", "x"), Observation(None, "eager")) == (
        {"precision": "bf16", "compile": None}, [])
    assert observed_settings("fp16", Observation("bf16", "x"), Observation(None, "e"))[0]["precision"] == "fp16"


def test_compile_state_from_the_model_and_dynamos_graphs(monkeypatch: pytest.MonkeyPatch) -> None:
    assert compile_state(torch.compile(nn.Linear(2, 2), backend="aot_eager"), None).value == "default"
    in_place = nn.Linear(2, 2)
    in_place.compile(backend="aot_eager")
    assert compile_state(in_place, None).known and compile_state(in_place, None).value == "default"
    plain = nn.Linear(2, 2)
    monkeypatch.setattr(observe, "graphs_compiled", lambda: None)
    assert compile_state(plain, None) == Observation(None, compile_state(plain, None).evidence, known=True)
    monkeypatch.setattr(observe, "graphs_compiled", lambda: 5)
    assert compile_state(plain, 3).value == "default"  # a compiled function ran while the Profiler watched
    assert compile_state(plain, 5).known is False  # compiled before the Profiler: may or may not be the loop's


@pytest.mark.parametrize(("mode", "expected"), [(None, "default"), ("reduce-overhead", "reduce-overhead"),
                                                 ("max-autotune", "max-autotune")])
def test_compile_mode_is_read_from_inductors_options(mode: str | None, expected: str) -> None:
    assert compile_mode(torch.compile(nn.Linear(2, 2), mode=mode)) == (expected, "inductor")


@pytest.mark.parametrize("set_stance", [True, False], ids=["torch>=2.6", "older-torch"])
def test_compiled_model_flops_depend_on_eager_counting(monkeypatch: pytest.MonkeyPatch, set_stance: bool) -> None:
    monkeypatch.setattr(observe, "eager_counting_available", lambda: set_stance)
    net = Net()
    model, opt = torch.compile(net, backend="aot_eager"), torch.optim.SGD(net.parameters(), lr=0.1)
    prof = Profiler(model, opt, device="cpu", warmup_steps=1, measure_ceiling=False, sample_utilization=False, peak_tflops=1.0)
    for x, y in prof.wrap(_loader(48)):
        F.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad()
        prof.step()
    m = prof.results().trials[0].metrics
    if set_stance:
        assert m.flops_per_step and m.flops_per_step > 0
        assert "flops_counted_eagerly" in [n.code for n in m.flop_notes]  # and the fingerprint's method says so
        assert m.fingerprint is not None and words(msg("flops_counted_eagerly")) in m.fingerprint.method
    else:
        assert m.flops_per_step is None and m.unavailable["flops_per_step"].code == "compiled_flops_unseen"


def test_the_observer_leaves_no_hook_or_stance_behind() -> None:
    from torch._dynamo import eval_frame

    def get_stance():  # torch keeps the stance in a module global and has no getter
        return eval_frame._stance

    net = nn.Linear(2, 2)
    with observe.StepObserver(net, "cpu") as observer:
        assert get_stance().stance == "force_eager"
        with torch.autocast("cpu", dtype=torch.bfloat16):
            net(torch.zeros(1, 2))
        net(torch.zeros(1, 2))
    assert get_stance().stance == "default" and not net._forward_pre_hooks
    assert not any(f[1] is not None and "global hooks" in f[1].pattern for f in warnings.filters)
    assert observer.forwards == Counter(bf16=1, off=1)


# ------------------------------------------------------------------------------------------ the rules


def _unknown(results: Results, *names: str) -> Results:
    results.trials[0].unknown_settings = list(names)
    return results


def _fingerprint_dtypes(results: Results, by_dtype: dict[str, float]) -> Results:
    from perfscope.results.fingerprint import Fingerprint

    results.trials[0].metrics.fingerprint = Fingerprint(method="test", flops=sum(by_dtype.values()),
                                                        matmul_flops_by_dtype=by_dtype)
    return results


def _ids(results: Results) -> set[str]:
    return {f.rule_id for f in run_rules(results)}


def test_precision_not_observed_is_not_fp32() -> None:
    assert {"PS101", "PS102"} <= _ids(_facts(_results(), kernels={"fp32_gemm_fraction": 0.9}))  # known fp32: fires
    assert not _ids(_unknown(_results(), "precision")) & {"PS101", "PS102"}
    # Unknown precision but evidence of fp32 matmuls: the counted dtypes, or the trace's GEMM kernel names.
    assert {"PS101", "PS102"} <= _ids(_fingerprint_dtypes(_unknown(_results(), "precision"), {"fp32": 1e12}))
    assert {"PS101", "PS102"} <= _ids(_facts(_unknown(_results(), "precision"), kernels={"fp32_gemm_fraction": 0.9}))
    assert not _ids(_facts(_unknown(_results(), "precision"), kernels={"fp32_gemm_fraction": 0.1})) & {"PS101", "PS102"}


def test_matmuls_already_in_bf16_get_no_tf32_or_autocast_advice() -> None:
    bf16_model = _fingerprint_dtypes(_results(), {"bf16": 9e11, "fp32": 1e11})  # configured fp32, model itself bf16
    assert not _ids(bf16_model) & {"PS101", "PS102"}
    assert "PS102" in _ids(_fingerprint_dtypes(_results(), {"fp32": 1e12}))


def _elementwise_trace(results: Results, names: list[str]) -> Results:
    top = [KernelStat(name=n, time_s=0.05 / len(names), count=1.0, category=categorize(n)) for n in names]
    times = Counter({"gemm": 0.04})
    for k in top:
        times[k.category] += k.time_s
    return _facts(results, kernels={"time_by_category": dict(times), "top": top})


def test_compile_not_observed_is_not_eager() -> None:
    eager_names = ["void at::native::vectorized_elementwise_kernel<4, GeluCUDAKernelImpl>"]
    assert not _ids(_unknown(_results(), "compile")) & {"PS303"}  # no trace: nothing says eager
    assert not _ids(_elementwise_trace(_unknown(_results(), "compile"), ["triton_poi_fused_add_mul_0"])) & {"PS303"}
    assert "PS303" in _ids(_elementwise_trace(_unknown(_results(), "compile"), eager_names))
    assert "PS303" not in _ids(_elementwise_trace(_results(compile="default"), eager_names))


def test_inductors_fused_kernels_are_not_unfused_elementwise_work() -> None:
    fused = ["triton_poi_fused_add_gelu_0", "triton_per_fused_native_layer_norm_1", "triton_red_fused_sum_2",
             "cpp_fused_add_mul_3"]
    assert {categorize(n) for n in fused} == {"elementwise", "normalization"}
    assert "PS303" not in _ids(_elementwise_trace(_results(), fused))
    assert "PS303" in _ids(_elementwise_trace(_results(), ["vectorized_elementwise_kernel<add>"] * 4))



@pytest.mark.parametrize("backend", ["aot_eager", pytest.param("inductor", marks=pytest.mark.slow)])
def test_the_counted_step_neither_recompiles_nor_changes_the_count(backend: str) -> None:
    """Forcing the counted step eager must cost the user's compiled loop no recompilation, and count what the
    eager module computes (the analytic FLOPs of the two linears)."""
    from torch._dynamo.utils import counters

    from tests.flops_oracle import linear_training_flops

    net = nn.Sequential(nn.Linear(IN, HIDDEN), nn.GELU(), nn.Linear(HIDDEN, OUT))
    model, opt = torch.compile(net, backend=backend), torch.optim.SGD(net.parameters(), lr=0.1)
    prof = Profiler(model, opt, device="cpu", warmup_steps=2, measure_ceiling=False, sample_utilization=False, peak_tflops=1.0)
    x, y = torch.randn(BATCH, IN), torch.randint(0, OUT, (BATCH,))
    frames = []
    for _ in range(6):
        F.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad()
        prof.step(BATCH)
        frames.append(counters["frames"]["total"])
    assert len(set(frames)) == 1  # compiled once at the first step, never again (the counted step is step 2)
    expected = linear_training_flops(BATCH, IN, HIDDEN, input_requires_grad=False) + linear_training_flops(
        BATCH, HIDDEN, OUT, input_requires_grad=True)
    assert prof.results().trials[0].metrics.flops_per_step == expected
