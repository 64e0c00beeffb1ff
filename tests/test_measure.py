"""Measurement pieces in isolation: the NVML sampler (with a fake NVML), the step timer, memory owners."""

import sys
import time
import types

import pytest
import torch
from torch import nn

from perfscope.measure import memory
from perfscope.measure.timing import StepTimer
from perfscope.measure.utilization import UtilizationSampler


def _fake_pynvml(*, fail_power: bool = False, fail_init: bool = False) -> types.ModuleType:
    nv = types.ModuleType("pynvml")
    nv.NVML_CLOCK_SM = 1
    nv.nvmlClocksThrottleReasonSwPowerCap = 0x4
    nv.nvmlClocksThrottleReasonHwSlowdown = 0x8
    nv.nvmlClocksThrottleReasonHwThermalSlowdown = 0x40
    nv.nvmlClocksThrottleReasonHwPowerBrakeSlowdown = 0x80
    nv.nvmlClocksThrottleReasonSwThermalSlowdown = 0x20

    def init():
        if fail_init:
            raise RuntimeError("NVML Shared Library Not Found")

    def power(handle):
        if fail_power:
            raise RuntimeError("Not Supported")
        return 350_000  # mW

    nv.nvmlInit = init
    nv.nvmlShutdown = lambda: None
    nv.nvmlDeviceGetHandleByIndex = lambda i: object()
    nv.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=87)
    nv.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(used=40 * 2**30)
    nv.nvmlDeviceGetPowerUsage = power
    nv.nvmlDeviceGetClockInfo = lambda h, kind: 1755
    nv.nvmlDeviceGetMaxClockInfo = lambda h, kind: 1980
    nv.nvmlDeviceGetCurrentClocksThrottleReasons = lambda h: 0x4 | 0x40
    return nv


def _sample(monkeypatch, **fake) -> object:
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml(**fake))
    with UtilizationSampler(device="cuda", interval_s=0.01) as sampler:
        time.sleep(0.15)
    return sampler.result()


def test_nvml_sampler_summarizes_device_and_host(monkeypatch):
    util = _sample(monkeypatch)
    assert util.gpu_util_percent.median == 87
    assert util.power_w.median == pytest.approx(350.0)
    assert util.sm_clock_mhz.median == 1755 and util.sm_clock_max_mhz == 1980
    assert util.gpu_memory_used_bytes_max == 40 * 2**30
    assert util.throttle_reasons_seen == ["HW thermal slowdown", "SW power cap"]
    assert util.cpu_percent is not None
    assert len(util.samples) >= 3


def test_unsupported_nvml_field_is_null_with_reason(monkeypatch):
    util = _sample(monkeypatch, fail_power=True)
    assert util.power_w is None
    assert "Not Supported" in util.unavailable["power_w"]
    assert util.gpu_util_percent.median == 87  # the other fields still sampled


def test_no_nvml_degrades_to_host_only(monkeypatch):
    util = _sample(monkeypatch, fail_init=True)
    assert "NVML unavailable" in util.unavailable["gpu"]
    assert util.gpu_util_percent is None and util.cpu_percent is not None


def test_step_timer_on_cpu_measures_each_step_and_data_wait():
    timer = StepTimer("cpu")
    timer.start()
    for _ in range(3):
        with timer.data_wait():
            time.sleep(0.02)
        time.sleep(0.01)
        timer.step_end()
    times, waits = timer.finish()
    assert len(times) == len(waits) == 3
    for t, w in zip(times, waits):
        assert 0.02 <= w < t
        assert t == pytest.approx(0.03, abs=0.02)


def test_memory_owners_of_adamw():
    model = nn.Linear(100, 100)
    opt = torch.optim.AdamW(model.parameters())
    model(torch.randn(4, 100)).sum().backward()
    opt.step()
    parts = memory.breakdown(model, opt, peak_bytes=10**6, grads_present=True)
    params = (100 * 100 + 100) * 4
    assert parts.parameters == params and parts.gradients == params
    assert parts.optimizer_state >= 2 * params  # exp_avg + exp_avg_sq: 8 B/param
    assert parts.activations_and_temporaries == 10**6 - parts.parameters - parts.gradients - parts.optimizer_state
