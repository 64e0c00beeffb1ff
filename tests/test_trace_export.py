"""The trace file perfscope keeps: its own folder, training-step labels, distributedInfo (issue 17 #5)."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest
import torch
from torch import nn

from perfscope.hooks import Profiler
from perfscope.trace import capture as capture_module
from perfscope.trace.capture import TraceCapture
from perfscope.trace.export import rewritten
from perfscope.trace.facts import trace_facts
from perfscope.trace.inputs import read_trace

STEP = re.compile(r'"ProfilerStep#(\d+)"')
HTA_RANK = re.compile(r'"rank":\s+(\d+)')  # how HTA finds a trace's rank: the first match in the file


def _train(trace_dir: Path, **kw) -> TraceCapture:
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with TraceCapture(trace_dir, device="cpu", **kw) as cap:
        for _ in range(cap.total_steps):
            model(torch.randn(8, 16)).sum().backward()
            opt.step()
            opt.zero_grad()
            cap.step()
    return cap


def _text(path: Path) -> str:
    return gzip.open(path, "rt", encoding="utf-8").read()


def _unique_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    keys = [k for k, _ in pairs]
    assert len(keys) == len(set(keys)), f"duplicate keys: {keys}"
    return dict(pairs)


def test_steps_are_labelled_by_training_step_and_the_header_says_rank_0_of_1(tmp_path: Path) -> None:
    cap = _train(tmp_path / "trace", first_step=10)  # profiler steps 0 (wait), 1 (warm-up), 2–4 recorded
    assert cap.path == tmp_path / "trace" / "rank0.json.gz" and cap.steps == [12, 13, 14]
    text = _text(cap.path)
    assert sorted({int(n) for n in STEP.findall(text)}) == [12, 13, 14]
    doc = json.loads(text, object_pairs_hook=_unique_keys)
    assert doc["distributedInfo"] == {"backend": None, "rank": 0, "world_size": 1}
    assert HTA_RANK.search(text).group(1) == "0"
    assert text.index('"distributedInfo"') < text.index('"traceEvents"')
    facts = trace_facts(cap.path, device_type="cpu", steps=cap.active)  # perfscope's own reading
    assert facts.steps == 3 and len(read_trace(cap.path).steps) == 3
    assert facts.kernels.time_by_category.get("gemm", 0) > 0


def test_the_rank_names_the_file_and_fills_distributed_info(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(capture_module, "distributed_info", lambda: {"backend": "gloo", "rank": 3, "world_size": 4})
    cap = _train(tmp_path / "trace", wait=0, warmup=1, active=1)
    assert cap.path == tmp_path / "trace" / "rank3.json.gz"
    text = _text(cap.path)
    assert json.loads(text)["distributedInfo"] == {"backend": "gloo", "rank": 3, "world_size": 4}
    assert HTA_RANK.search(text).group(1) == "3"


@pytest.mark.skipif(not torch.distributed.is_available(), reason="torch built without torch.distributed")
def test_inside_a_process_group_torch_s_own_distributed_info_is_kept_once(tmp_path: Path) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        cap = _train(tmp_path / "trace", wait=0, warmup=1, active=1)
    finally:
        dist.destroy_process_group()
    text = _text(cap.path)
    info = json.loads(text, object_pairs_hook=_unique_keys)["distributedInfo"]  # one key, no duplicate
    assert (info["backend"], info["rank"], info["world_size"]) == ("gloo", 0, 1)
    assert text.count('"distributedInfo"') == 1


def test_rewrite_is_exact_on_any_layout() -> None:
    torch_header = [b'{\n', b'  "schemaVersion": 1,\n', b'  "distributedInfo": {"backend": "nccl", "rank": 5, "world_size": 8},\n',
                    b'  "traceEvents": [\n']
    events = [b'  {"ph": "X", "name": "ProfilerStep#2", "cat": "user_annotation"},\n',
              b'  {"ph": "X", "name": "ProfilerStep#2x", "args": {"note": "ProfilerStep#3 inside a string"}}\n', b']}\n']
    out = b"".join(rewritten(iter(torch_header + events), first_step=7, info={"rank": 0}))
    doc = json.loads(out, object_pairs_hook=_unique_keys)
    assert doc["distributedInfo"]["rank"] == 5  # torch's own, untouched
    assert [e["name"] for e in doc["traceEvents"]] == ["ProfilerStep#9", "ProfilerStep#2x"]  # only whole labels
    assert doc["traceEvents"][1]["args"]["note"] == "ProfilerStep#3 inside a string"
    one_line = b'{"traceEvents": [{"name": "ProfilerStep#0"}, {"name": "ProfilerStep#1"}]}'
    doc = json.loads(b"".join(rewritten(iter([one_line]), first_step=4, info={"backend": None, "rank": 0, "world_size": 1})))
    assert doc["distributedInfo"]["world_size"] == 1 and [e["name"] for e in doc["traceEvents"]] == ["ProfilerStep#4", "ProfilerStep#5"]
    bare_list = [b'[{"name": "ProfilerStep#1"}]']  # no object to hold metadata: renumbered, nothing added
    assert json.loads(b"".join(rewritten(iter(bare_list), first_step=1, info={"rank": 0}))) == [{"name": "ProfilerStep#2"}]


def _hooks_run(out: Path, trace_dir: Path | None = None, steps: int = 16) -> Path:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    prof = Profiler(model, opt, device="cpu", warmup_steps=2, capture_steps=(10, 13), trace_dir=trace_dir,
                    sample_utilization=False, measure_ceiling=False)
    for x in prof.wrap([torch.randn(8, 16) for _ in range(steps)]):
        model(x).sum().backward()
        opt.step()
        opt.zero_grad()
        prof.step()
    return prof.save(out)


def test_hooks_capture_records_exactly_capture_steps_labelled_as_such(tmp_path: Path) -> None:
    from perfscope.results import Results

    results = Results.load(_hooks_run(tmp_path / "run"))
    m = results.trials[0].metrics
    assert m.trace_path == "trace/rank0.json.gz"
    assert sorted(p.name for p in (tmp_path / "run" / "trace").iterdir()) == ["rank0.json.gz"]
    assert sorted(int(n) for n in STEP.findall(_text(tmp_path / "run" / m.trace_path))) == [10, 11, 12]
    assert m.trace_facts.steps == 3
    # 16 steps: 2 warm-up, 9 (the profiler's warm-up) + 10–12 profiled, 1 FLOP-counting step: 9 timed (no memory
    # window: Profiler(memory=False), the default).
    assert m.steps == 16 - 2 - 4 - 1


def test_a_trace_dir_that_is_the_output_folder_leaves_no_trace_beside_results_json(tmp_path: Path) -> None:
    _hooks_run(tmp_path / "run", trace_dir=tmp_path / "run")
    assert sorted(p.name for p in (tmp_path / "run").glob("*.gz")) == []
    assert (tmp_path / "run" / "trace" / "rank0.json.gz").is_file()
