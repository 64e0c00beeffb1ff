"""The structural fingerprint: counted from one real step, identical for identical code, and each variant of
tests/workloads/structure_variants.py shows up in the field that names its cause."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
import torch
from torch import nn

from perfscope.measure.structure import (
    CompileCounters,
    StructureCounter,
    call_site,
    classify_copy,
)
from perfscope.results.config import TrialConfig
from perfscope.results.fingerprint import Fingerprint
from perfscope.results.messages import msg
from perfscope.results.serde import from_jsonable, to_jsonable
from perfscope.trial.loop import run_trial
from perfscope.workload import load_workload

WORKLOAD = Path(__file__).parent / "workloads" / "structure_variants.py"
ITEM_LINE = next(i for i, line in enumerate(WORKLOAD.read_text().splitlines(), 1) if "out.item()" in line)


@functools.cache
def _fingerprint(variant: str, precision: str = "fp32", compile: str | None = None, repeat: int = 0) -> Fingerprint:
    import os

    old = os.environ.get("PERFSCOPE_TEST_VARIANT")
    os.environ["PERFSCOPE_TEST_VARIANT"] = variant
    try:
        workload = load_workload(WORKLOAD)
    finally:
        if old is None:
            os.environ.pop("PERFSCOPE_TEST_VARIANT", None)
        else:
            os.environ["PERFSCOPE_TEST_VARIANT"] = old
    config = TrialConfig(micro_batch_size=8, steps=2, warmup_steps=1, precision=precision, compile=compile,  # type: ignore[arg-type]
                         sample_utilization=False)
    run = run_trial(workload, config)
    assert run.metrics.fingerprint is not None, run.metrics.unavailable
    return run.metrics.fingerprint


def test_identical_code_gives_an_identical_fingerprint_in_one_process():
    first, second = _fingerprint("base"), _fingerprint("base", repeat=1)
    assert to_jsonable(first) == to_jsonable(second)
    assert first.op_calls > 0 and first.flops > 0
    assert first.matmul_dtype_shares() == {"fp32": 1.0}
    assert first.memory is None and "memory" in first.unavailable  # CPU: no allocator peak, said so


def test_the_fingerprint_counts_matmul_flops_like_the_flop_counter():
    # Linear 32->64, 64->64, 64->10 at batch 8: fwd + bwd (no input grad for the first layer)
    expected = 2 * 8 * (32 * 64 * 2 + 64 * 64 * 3 + 64 * 10 * 3)
    assert _fingerprint("base").flops == expected
    assert set(_fingerprint("base").flops_by_op) == {"aten::addmm", "aten::mm"}


def test_a_per_step_item_is_a_sync_at_the_users_line():
    base, item = _fingerprint("base"), _fingerprint("item")
    new = {s.key: s.count for s in item.syncs}.items() - {s.key: s.count for s in base.syncs}.items()
    # pytest runs from the repository root: the site is relative to the working directory
    assert new == {(f"aten::_local_scalar_dense (.item()) at tests/workloads/structure_variants.py:{ITEM_LINE}", 1)}
    assert item.syncs_per_step == base.syncs_per_step + 1


def test_an_extra_matmul_adds_flops_and_ops():
    base, extra = _fingerprint("base"), _fingerprint("extra_matmul")
    assert extra.flops == base.flops + 2 * 8 * 64 * 64 * 3
    assert extra.op_calls > base.op_calls
    assert extra.ops["aten::addmm"] == base.ops["aten::addmm"] + 1


def test_a_float_head_outside_autocast_moves_matmul_flops_out_of_bf16():
    base, head = _fingerprint("base", "bf16"), _fingerprint("fp32_head", "bf16")
    assert base.matmul_dtype_shares() == {"bf16": 1.0}
    shares = head.matmul_dtype_shares()
    assert 0 < shares["fp32"] < 0.5 and shares["bf16"] + shares["fp32"] == pytest.approx(1.0)
    assert head.flops == base.flops


def test_a_graph_break_under_compile_is_counted_with_its_reason():
    base, broken = _fingerprint("base", compile="default"), _fingerprint("graph_break", compile="default")
    assert base.compile is not None and broken.compile is not None
    assert (base.compile.graph_breaks, base.compile.graphs, base.compile.recompiles) == (0, 1, 0)
    assert broken.compile.graph_breaks == 1 and broken.compile.graphs == 2
    assert any("graph_break()" in reason for reason in broken.compile.break_reasons)


def test_the_fingerprint_survives_results_json():
    fp = _fingerprint("item")
    assert to_jsonable(from_jsonable(Fingerprint, to_jsonable(fp))) == to_jsonable(fp)


def test_copies_are_classified_by_direction_and_host_memory():
    cpu, cuda = torch.device("cpu"), torch.device("cuda", 0)
    assert classify_copy(cpu, cuda, pinned=False) == "h2d pageable"
    assert classify_copy(cpu, cuda, pinned=True) == "h2d pinned"
    assert classify_copy(cuda, cpu, pinned=False) == "d2h pageable"
    assert classify_copy(cpu, cpu, pinned=False) is None


def test_call_site_is_the_callers_line_and_the_counter_sees_syncs_outside_a_trial():
    assert call_site().startswith("tests/test_fingerprint.py:")
    model = nn.Linear(4, 4)
    x = torch.randn(2, 4)
    with StructureCounter() as counter:
        loss = model(x).sum()
        loss.backward()
        value = float(loss.detach())  # a sync written as float(): the same op as .item()
    fp = counter.fingerprint(method="test")
    assert value == model(x).sum().item()  # the counter observed the sync without changing what it returned
    assert [s.count for s in fp.syncs] == [1] and "test_fingerprint.py:" in fp.syncs[0].site
    assert CompileCounters().facts() is None or CompileCounters().facts().graph_breaks == 0


# ------------------------------------------------------------------------------------------ hooks


def _hooks_fingerprint(log_loss: bool) -> Fingerprint:
    import torch.nn.functional as F

    from perfscope.hooks.profiler import Profiler

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))
    opt = torch.optim.AdamW(model.parameters())
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randn(8, 32, generator=g), torch.randint(0, 10, (8,), generator=g)) for _ in range(6)]
    prof = Profiler(model, opt, device="cpu", warmup_steps=2, measure_ceiling=False, sample_utilization=False,
                    peak_tflops=1.0)
    for x, y in prof.wrap(batches):
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        if log_loss:
            _ = loss.item()  # HOOKS-ITEM
        opt.step()
        opt.zero_grad(set_to_none=True)
        prof.step()
    metrics = prof.results().trials[0].metrics
    assert metrics.fingerprint is not None, metrics.unavailable
    return metrics.fingerprint


def test_the_hooks_record_the_fingerprint_at_their_flop_counting_step():
    first, second, logged = _hooks_fingerprint(False), _hooks_fingerprint(False), _hooks_fingerprint(True)
    assert to_jsonable(first) == to_jsonable(second)
    assert first.flops == 2 * 8 * (32 * 64 * 2 + 64 * 10 * 3) and first.syncs == []
    line = next(i for i, text in enumerate(Path(__file__).read_text().splitlines(), 1) if "# HOOKS-ITEM" in text)
    assert [(s.site, s.count) for s in logged.syncs] == [(f"tests/test_fingerprint.py:{line}", 1)]


def test_an_optimizers_host_step_count_is_no_sync():
    model = nn.Linear(4, 4)
    opt = torch.optim.AdamW(model.parameters(), foreach=False)
    model(torch.randn(2, 4)).sum().backward()
    opt.step()  # state exists: the counted step reads its host-side step counters
    with StructureCounter() as counter:
        loss = model(torch.randn(2, 4)).sum()
        loss.backward()
        opt.step()
    # AdamW read its step counters (host tensors, on a GPU too): ops, not syncs. (print(t) is not seen at all:
    # torch formats tensors with dispatch modes disabled; docs/ci-gate.md lists it.)
    fp = counter.fingerprint(method="t")
    assert fp.ops["aten::_local_scalar_dense"] == 2 and fp.syncs == []


def test_kernel_launches_host_launch_calls_and_cuda_graph_replays_come_from_the_trace(tmp_path):
    """CUDA only (a Kineto-shaped trace, tests/kineto.py): a CUDA graph replay is one cudaGraphLaunch on the host
    whatever kernels it runs; the fingerprint tells launches made by the host from replays."""
    from perfscope.measure.structure import fill_kernel_launches
    from perfscope.trace.facts import trace_facts
    from tests.kineto import KinetoTrace

    trace = KinetoTrace()
    for n in (2, 3):
        with trace.step(n):
            with trace.op("aten::mm"):
                for i in range(3):
                    trace.launch(f"gemm_{i}", 50)
            with trace.op("CUDAGraph::replay"):
                trace.launch("graph_kernel", 200, api="cudaGraphLaunch")
    facts = trace_facts(trace.write(tmp_path / "t.json.gz"), device_type="cuda", steps=2)
    assert facts.launch.launch_calls_per_step == {"cudaGraphLaunch": 1.0, "cudaLaunchKernel": 3.0}
    fp = Fingerprint(method="t", unavailable={"kernel_launches": msg("kernel_launches_from_trace")})
    fill_kernel_launches(fp, facts)
    assert fp.kernel_launches == {"compute kernels": 4, "host launch calls": 3, "CUDA graph replays": 1}
    assert fp.unavailable == {}


def test_under_torch_compile_the_counted_step_is_the_eager_one():
    """dynamo skips frames while a dispatch mode is active (torch/_dynamo/convert_frame.py): ops, FLOPs and
    dtypes of a compiled trial are its eager step's, so they compare with an eager baseline; what compiling did
    is in the compile facts (and on CUDA in the traced kernel launches). docs/ci-gate.md says so."""
    eager, compiled = _fingerprint("base"), _fingerprint("base", compile="default")
    assert compiled.ops == eager.ops and compiled.flops_by_op == eager.flops_by_op
    assert "eager step" in compiled.method and compiled.compile is not None and compiled.compile.graphs == 1


def test_reads_no_dispatch_mode_sees_are_syncs_at_the_users_line(capsys):
    """print(t) (torch formats with the modes disabled), tolist()/numpy() (read host memory directly) and
    boolean-mask indexing (its nonzero runs below the dispatcher) are syncs on a GPU: counted at the caller."""
    here = Path(__file__).name
    t = torch.randn(6)
    with StructureCounter() as counter:
        print(t)  # READ-PRINT
        values = t.tolist()  # READ-TOLIST
        array = t.numpy()  # READ-NUMPY
        positive = t[t > 0]  # READ-MASK-GET
        t[t < 0] = 0.0  # READ-MASK-PUT
        label = f"{t.sum():.2f}"  # READ-FORMAT
    assert "tolist" not in torch.Tensor.__dict__ and "numpy" not in torch.Tensor.__dict__  # unwrapped on exit
    lines = {tag: i for i, text in enumerate(Path(__file__).read_text().splitlines(), 1) for tag in
             ("READ-PRINT", "READ-TOLIST", "READ-NUMPY", "READ-MASK-GET", "READ-MASK-PUT", "READ-FORMAT") if f"# {tag}" in text}
    syncs = {(s.op, s.site): s.count for s in counter.fingerprint(method="t").syncs}
    assert syncs == {
        ("print/str/repr of a tensor (formats its values on the host)", f"tests/{here}:{lines['READ-PRINT']}"): 1,
        ("tensor.tolist()", f"tests/{here}:{lines['READ-TOLIST']}"): 1,
        ("tensor.numpy()", f"tests/{here}:{lines['READ-NUMPY']}"): 1,
        ("aten::index with a boolean mask (x[mask])", f"tests/{here}:{lines['READ-MASK-GET']}"): 1,
        ("aten::index_put with a boolean mask (x[mask] = v)", f"tests/{here}:{lines['READ-MASK-PUT']}"): 1,
        ("aten::_local_scalar_dense (.item())", f"tests/{here}:{lines['READ-FORMAT']}"): 1,
    }
    assert len(values) == len(array) == 6 and positive.numel() <= 6 and label and "tensor(" in capsys.readouterr().out
    # a CUDA run counts reads of device tensors only: these host tensors are no sync there
    with StructureCounter(device="cuda") as on_gpu:
        print(t), t.tolist(), t[t > 0]
    assert on_gpu.fingerprint(method="t").syncs == []


# ------------------------------------------------------------------------------ syncs over the whole window


def _periodic_step(i: int, every: int) -> None:
    """A step that logs every ``every`` steps; on CUDA torch's sync debug mode warns at the read (TORCH_WARN from
    the C++ call, located at the calling line): emulated here with the same warning from the same line."""
    import warnings

    from perfscope.measure.structure import SYNC_WARNING

    if i % every == 0:
        warnings.warn(SYNC_WARNING)  # PERIODIC-SYNC


def test_a_sync_every_n_steps_is_counted_over_the_whole_window_without_adding_one():
    """CUDA only (fakes here): the window counter sets torch's sync debug mode to warn, counts its warnings by call
    site (not shown), leaves other warnings and the user's own mode alone, and ignores perfscope's clock reads."""
    import warnings

    from perfscope.measure.structure import _MEASURE_DIR, SYNC_WARNING, WINDOW_SYNCS_ON_CPU, WindowSyncCounter

    modes: list[int] = []
    filters = list(warnings.filters)
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        with WindowSyncCounter("cuda", get_mode=lambda: 0, set_mode=modes.append) as counter:
            for i in range(40):
                _periodic_step(i, every=10)
            warnings.warn("the user's own warning")
            exec(compile(f"import warnings; warnings.warn({SYNC_WARNING!r})", _MEASURE_DIR + "clock.py", "exec"), {})
    line = next(i for i, text in enumerate(Path(__file__).read_text().splitlines(), 1) if "# PERIODIC-SYNC" in text)
    window = counter.result(40)
    assert window is not None and window.sites == {f"tests/test_fingerprint.py:{line}": 4} and window.steps == 40
    assert modes == [1, 0] and [str(w.message) for w in shown] == ["the user's own warning"]
    assert list(warnings.filters) == filters  # the filters are restored
    mine = WindowSyncCounter("cuda", get_mode=lambda: 2, set_mode=modes.append)
    with mine:
        pass
    assert mine.result(40) is None and mine.reason == msg("sync_debug_mode_already_set") and modes == [1, 0]
    with WindowSyncCounter("cpu") as on_cpu:
        pass
    assert on_cpu.result(40) is None and on_cpu.reason == WINDOW_SYNCS_ON_CPU


def test_a_cpu_trial_says_its_syncs_cover_one_step():
    fp = _fingerprint("base")
    assert fp.steps == 1 and fp.window_syncs is None and fp.unavailable["window_syncs"].code == "window_syncs_on_cpu"
