"""The micro-benchmark timing loop: warm-up, then each repeat between two clock marks (CUDA events on a GPU).

No GPU here: a fake clock stands in for perfscope.measure.clock.CudaClock and records the order of calls.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from perfscope.measure import clock as microbench
from perfscope.measure.clock import median_seconds
from perfscope.measure.peaks import benchmark_alignment, measure_matmul_tflops
from perfscope.results import GemmShape


class FakeEventClock:
    """Marks are numbered events; elapsed time is read only after the last mark was waited on."""

    device_type = "cuda"

    def __init__(self, seconds: list[float] | float = 1e-3) -> None:
        self.log: list[Any] = []
        self.marks = 0
        self.seconds = seconds
        self.waited: int | None = None

    def mark(self) -> int:
        self.marks += 1
        self.log.append(("mark", self.marks))
        return self.marks

    def ready(self, mark: int) -> bool:
        return True

    def wait(self, mark: int) -> None:
        self.waited = mark
        self.log.append(("wait", mark))

    def elapsed_s(self, start: int, end: int) -> float:
        assert self.waited is not None and self.waited >= end, "an event read before it was waited on"
        assert end == start + 1
        if isinstance(self.seconds, list):
            return self.seconds[end // 2 - 1]
        return self.seconds


@pytest.fixture
def fake_clock(monkeypatch: pytest.MonkeyPatch) -> FakeEventClock:
    clock = FakeEventClock()
    syncs: list[str] = []
    monkeypatch.setattr(microbench, "clock_for", lambda device: clock)
    monkeypatch.setattr(microbench, "synchronize", lambda device: syncs.append(str(device)) or clock.log.append(("sync", str(device))))
    return clock


def test_warmup_then_one_sync_then_marked_repeats_and_the_median(fake_clock: FakeEventClock) -> None:
    fake_clock.seconds = [5e-3, 1e-3, 2e-3, 1e-3, 9e-3]
    calls: list[int] = []
    seconds = median_seconds(lambda: calls.append(fake_clock.marks) or fake_clock.log.append("call"), "cuda", warmup=3, repeats=5)
    assert seconds == 2e-3
    assert fake_clock.log[:4] == ["call"] * 3 + [("sync", "cuda")]  # warm-up before anything is timed
    timed = fake_clock.log[4:]
    assert timed[:3] == [("mark", 1), "call", ("mark", 2)]  # each call between its own two marks
    assert timed.count("call") == 5 and ("sync", "cuda") not in timed  # no device-wide sync between repeats
    assert timed[-1] == ("wait", 10)  # the last event waited on, then read


def test_matmul_ceiling_is_timed_by_the_device_clock(fake_clock: FakeEventClock) -> None:
    tflops = measure_matmul_tflops("cpu", "fp32", size=64)
    assert tflops == pytest.approx(2 * 64**3 / 1e-3 / 1e12)
    assert fake_clock.marks == 2 * 10  # at least 10 repeats by default


def test_alignment_benchmark_is_timed_by_the_device_clock(fake_clock: FakeEventClock) -> None:
    shape = GemmShape(op="aten::mm", shape=[256, 250, 250], dtype="float", count=1, time_s=1e-3, time_source="cpu op", misaligned=["k", "n"])
    (row,) = benchmark_alignment([shape], device="cpu", repeats=10)
    assert row.time_s == row.padded_time_s == 1e-3
    assert row.speedup_per_flop == pytest.approx((256 * 256 * 256) / (256 * 250 * 250))


def test_a_real_cpu_timing_is_positive() -> None:
    assert median_seconds(lambda: sum(range(1000)), "cpu", warmup=1, repeats=10) > 0


def test_a_slow_dtype_gets_a_smaller_matmul(monkeypatch: pytest.MonkeyPatch) -> None:
    """bf16 on a CPU without bf16 units took 2.4 s per 1024³ matmul: 13 of them made every probe 30 s long."""
    from perfscope.measure import peaks

    sizes: list[int] = []

    def fake_time(fn, device, *, warmup, repeats):  # noqa: ANN001
        n = sizes[-1]
        return 2 * n**3 / 5e9  # a slow path: 5 GFLOP/s

    real_randn = torch.randn
    monkeypatch.setattr(peaks.torch, "randn", lambda n, *a, **k: sizes.append(n) or real_randn(2, 2))
    monkeypatch.setattr(peaks, "median_seconds", fake_time)
    monkeypatch.setattr(peaks, "fastest_seconds", fake_time)
    monkeypatch.setattr(peaks.torch, "mm", lambda a, b: a)
    tflops = peaks.measure_matmul_tflops("cpu", "bf16", size=1024)
    assert tflops == pytest.approx(5e9 / 1e12)
    timed = sizes[-1]
    assert 256 <= timed < 1024 and 2 * timed**3 / 5e9 <= peaks.CALL_BUDGET_S
