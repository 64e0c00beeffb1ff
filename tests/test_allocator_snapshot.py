"""The out-of-memory allocator snapshot (perfscope.measure.allocator_snapshot), on CPU: the summary of torch's
snapshot form and the observer's seam. The observer itself needs a CUDA build: it has not run here.

The snapshot below is written in the form torch.cuda.memory._snapshot() documents (Segment / Block / Frame /
TraceEntry), and torch's own reader of that form (torch.cuda._memory_viz.segsum) is asked to agree with the summary.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.cuda import _memory_viz

from perfscope.measure.allocator_snapshot import OomSnapshot, load_snapshot, summarize
from perfscope.results.messages import Message, msg
from perfscope.wording import words

MiB = 1 << 20
USER = [{"filename": "??", "line": 0, "name": "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc"},
        {"filename": "/env/lib/python3.11/site-packages/torch/nn/modules/linear.py", "line": 125, "name": "forward"},
        {"filename": "/home/me/train.py", "line": 41, "name": "step"},
        {"filename": "/home/me/train.py", "line": 90, "name": "<module>"}]
OPTIMIZER = [{"filename": "/env/lib/python3.11/site-packages/torch/optim/adamw.py", "line": 300, "name": "_init_group"},
             {"filename": "/home/me/train.py", "line": 44, "name": "step"}]


def _block(address: int, size: int, state: str, frames: list[dict[str, Any]]) -> dict[str, Any]:
    return {"address": address, "size": size, "requested_size": size, "state": state, "frames": frames}


SNAPSHOT = {
    "segments": [
        {"device": 0, "address": 1 << 32, "total_size": 20 * MiB, "stream": 0, "segment_type": "large",
         "segment_pool_id": (0, 0), "allocated_size": 14 * MiB, "active_size": 14 * MiB, "is_expandable": False,
         "frames": [], "blocks": [_block(1 << 32, 12 * MiB, "active_allocated", USER),
                                  _block((1 << 32) + 12 * MiB, 2 * MiB, "active_allocated", OPTIMIZER),
                                  _block((1 << 32) + 14 * MiB, 6 * MiB, "inactive", [])]},
        {"device": 0, "address": 1 << 33, "total_size": 2 * MiB, "stream": 0, "segment_type": "small",
         "segment_pool_id": (0, 0), "allocated_size": 512, "active_size": 512, "is_expandable": False,
         "frames": [], "blocks": [_block(1 << 33, 512, "active_allocated", USER[:1]),
                                  _block((1 << 33) + 512, 2 * MiB - 512, "inactive", [])]},
    ],
    "device_traces": [[{"action": "alloc", "addr": 1 << 32, "size": 12 * MiB, "stream": 0, "frames": USER},
                       {"action": "oom", "size": 64 * MiB, "stream": 0, "device_free": 3 * MiB, "frames": USER}]],
}


def test_the_summary_agrees_with_torchs_own_reader_and_names_the_python_line() -> None:
    summary = summarize(SNAPSHOT, path="oom-snapshot-rank0.pickle")
    assert summary.reserved_bytes == 22 * MiB and summary.live_bytes == 14 * MiB + 512 and summary.live_blocks == 3
    text = _memory_viz.segsum(SNAPSHOT)
    assert "total_reserved: 22.0MiB" in text and "total_allocated: 14.0MiB" in text
    # The innermost frame outside torch; a block with only C++ frames has no site.
    assert summary.sites == [("train.py:41 step", 12 * MiB), ("train.py:44 step", 2 * MiB)]
    assert summary.requested_bytes == 64 * MiB
    assert summary.text().startswith("at the OOM: 23.1 MB reserved, 14.7 MB in 3 live blocks, asking for 67.1 MB more; "
                                     "most from train.py:41 step (12.6 MB)")


class _FakeMemory:
    """torch.cuda.memory's three calls, as the observer makes them."""

    def __init__(self) -> None:
        self.history: list[Any] = []

    def _record_memory_history(self, enabled: Any = "all", **kwargs: Any) -> None:
        self.history.append(enabled)

    def _snapshot(self) -> dict[str, Any]:
        return SNAPSHOT


def test_the_observer_dumps_the_snapshot_once_and_summarizes_it(tmp_path: Path) -> None:
    memory, attached = _FakeMemory(), []
    oom = OomSnapshot(tmp_path, rank=3, history=True, memory=memory, attach=attached.append)
    assert oom.start() and attached == [oom.observe] and memory.history == ["all"]
    attached[0](0, 64 * MiB, 14 * MiB, 3 * MiB)  # what the allocator passes: device, size asked, allocated, free
    path = tmp_path / "oom-snapshot-rank3.pickle"
    assert load_snapshot(path) == SNAPSHOT and oom.summary is not None and oom.summary.path == str(path)
    assert "train.py:41 step" in oom.summary.text() and str(path) in oom.summary.text()
    path.unlink()
    attached[0](0, 1, 1, 1)  # a second OOM (the job retried smaller): the first state is the one kept
    assert not path.exists()
    oom.stop()
    assert memory.history == ["all", None]


def test_without_history_the_snapshot_still_comes_and_the_failed_size_is_the_observers(tmp_path: Path) -> None:
    memory = _FakeMemory()
    memory._snapshot = lambda: {"segments": SNAPSHOT["segments"], "device_traces": []}  # type: ignore[method-assign]
    oom = OomSnapshot(tmp_path, memory=memory, attach=lambda observer: None)
    assert oom.start() and memory.history == []
    oom.observe(0, 8 * MiB, 0, 0)
    assert oom.summary is not None and oom.summary.requested_bytes == 8 * MiB


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU answer")
def test_without_cuda_it_says_so_and_attaches_nothing(tmp_path: Path) -> None:
    oom = OomSnapshot(tmp_path)
    assert not oom.start() and oom.unavailable == msg("oom_snapshot_no_cuda")


def test_a_snapshot_file_that_holds_a_class_is_refused_unopened(tmp_path: Path) -> None:
    bad = tmp_path / "bad.pickle"
    bad.write_bytes(pickle.dumps({"segments": [Path("x")]}))
    with pytest.raises(ValueError, match=r"bad\.pickle: not a torch memory snapshot"):
        load_snapshot(bad)
    (tmp_path / "empty.pickle").write_bytes(pickle.dumps([1, 2]))
    with pytest.raises(ValueError, match="no 'segments'"):
        load_snapshot(tmp_path / "empty.pickle")


def test_the_hooks_observer_logs_one_warning_and_notes_the_snapshot(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from perfscope.measure.allocator_snapshot import on_oom_snapshot

    notes: list[Message] = []
    oom = OomSnapshot(tmp_path, notes=notes, memory=_FakeMemory(), attach=lambda observer: None)
    assert oom.start()
    with caplog.at_level("WARNING", logger="perfscope"):
        oom.observe(0, 64 * MiB, 0, 0)
    assert notes == [msg("cuda_oom", device=0, held=oom.summary.message())]
    assert [r.getMessage() for r in caplog.records] == [f"perfscope: {words(notes[0])}"]  # the log says the note
    assert notes[0].params["held"].params["sites"] == [["train.py:41 step", 12 * MiB], ["train.py:44 step", 2 * MiB]]
    assert on_oom_snapshot(torch.device("cpu"), tmp_path, notes) is None  # CPU: nothing attached


def test_an_oom_trials_error_carries_what_held_the_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The trial child's path, its CUDA seam faked: the allocator calls the observer, then the OOM is raised."""
    import json

    from perfscope.results.config import TrialConfig
    from perfscope.trial import child
    from perfscope.trial.spec import TrialSpec, write_spec

    oom = OomSnapshot(tmp_path, memory=_FakeMemory(), attach=lambda observer: None)
    assert oom.start()

    def run_trial(spec: TrialSpec, result_path: Path) -> dict[str, Any]:
        oom.observe(0, 64 * MiB, 0, 0)
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 64.00 MiB")

    original = child._oom_snapshot
    monkeypatch.setattr(child, "_oom_snapshot", lambda spec, result_path: oom)
    monkeypatch.setattr(child, "_run_trial", run_trial)
    spec_path, result_path = tmp_path / "spec.json", tmp_path / "result.json"
    write_spec(spec_path, TrialSpec(workload_path="/w.py", config=TrialConfig(micro_batch_size=8), result_path=str(result_path)))
    assert child.main(["child", str(spec_path)]) == 0
    result = json.loads(result_path.read_text())
    assert result["status"] == "oom"
    assert result["error"].splitlines() == ["OutOfMemoryError: CUDA out of memory. Tried to allocate 64.00 MiB",
                                            oom.summary.text()]
    assert str(tmp_path / "oom-snapshot-rank0.pickle") in result["error"]
    assert original(TrialSpec(workload_path="/w.py", config=TrialConfig(micro_batch_size=8)), result_path) is None  # CPU
