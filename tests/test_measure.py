"""Measurement pieces in isolation: the NVML sampler (with a fake NVML), the step timer, memory owners."""

import sys
import time
import types

import pytest
import torch
from torch import nn

from perfscope.measure import memory
from perfscope.measure.clock import clock_for
from perfscope.measure.utilization import UtilizationSampler
from perfscope.measure.window import WindowRecorder
from perfscope.results.messages import msg
from tests.waiting import wait_for

# NVML's view of the machine, in NVML (PCI) order: the UUID and what each GPU reports.
NVML_GPUS = [("GPU-00000000-aaaa", 12), ("GPU-11111111-bbbb", 87)]


class NVMLNotFound(Exception):
    pass


def _fake_pynvml(*, fail_power: bool = False, fail_init: bool = False, gpus=NVML_GPUS) -> types.ModuleType:
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
    def by_uuid(uuid):
        for nvml_uuid, util in gpus:
            if nvml_uuid == uuid:
                return types.SimpleNamespace(uuid=nvml_uuid, util=util)
        raise NVMLNotFound(f"Not Found: {uuid}")

    nv.nvmlDeviceGetHandleByIndex = lambda i: types.SimpleNamespace(uuid=gpus[i][0], util=gpus[i][1])
    nv.nvmlDeviceGetHandleByUUID = by_uuid
    nv.nvmlSystemGetDriverVersion = lambda: "575.51"
    nv.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=h.util)
    nv.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(used=40 * 2**30)
    nv.nvmlDeviceGetPowerUsage = power
    nv.nvmlDeviceGetClockInfo = lambda h, kind: 1755
    nv.nvmlDeviceGetMaxClockInfo = lambda h, kind: 1980
    nv.nvmlDeviceGetCurrentClocksThrottleReasons = lambda h: 0x4 | 0x40
    return nv


def _cuda_sees(monkeypatch, *uuids: str) -> None:
    """CUDA's view: the visible devices in CUDA order (torch reports UUIDs without NVML's prefix)."""
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: types.SimpleNamespace(uuid=uuids[i]))


def _sample(monkeypatch, index: int | None = 0, cuda: tuple[str, ...] = ("11111111-bbbb",), **fake) -> object:
    """Sample with a fake NVML; by default CUDA_VISIBLE_DEVICES=1: CUDA device 0 is NVML's GPU 1."""
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml(**fake))
    _cuda_sees(monkeypatch, *cuda)
    with UtilizationSampler(device="cuda", device_index=index, interval_s=0.01) as sampler:
        wait_for(lambda: len(sampler._samples) >= 3, "three samples from the sampler's thread", timeout_s=60)
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
    assert util.unavailable["power_w"].code == "nvml_error" and "Not Supported" in util.unavailable["power_w"].params["error"]
    assert util.gpu_util_percent.median == 87  # the other fields still sampled


def test_nvml_samples_the_cuda_device_by_uuid_not_by_index(monkeypatch):
    """CUDA_VISIBLE_DEVICES=1 (or CUDA's fastest-first order): CUDA device 0 is NVML's device 1. By index the
    sampler read GPU 0 (12%); by UUID it reads the GPU the trial runs on (87%)."""
    util = _sample(monkeypatch)
    assert util.gpu_util_percent.median == 87
    assert _sample(monkeypatch, index=1, cuda=("11111111-bbbb", "00000000-aaaa")).gpu_util_percent.median == 12


def test_each_rank_samples_its_own_device_not_device_0(monkeypatch):
    """Two ranks on two visible GPUs: rank 1's torch.cuda.set_device(1) (from its LOCAL_RANK) makes CUDA device 1
    its "cuda". A sampler given no index (as the trial loop builds it) samples that GPU, by its UUID."""
    cuda = ("00000000-aaaa", "11111111-bbbb")
    for rank, expected in ((0, 12), (1, 87)):
        monkeypatch.setattr(torch.cuda, "current_device", lambda rank=rank: rank)
        assert _sample(monkeypatch, index=None, cuda=cuda).gpu_util_percent.median == expected


def test_no_current_cuda_device_is_no_gpu_sample_with_the_reason(monkeypatch):
    def no_device() -> int:
        raise RuntimeError("No CUDA GPUs are available")

    monkeypatch.setattr(torch.cuda, "current_device", no_device)
    util = _sample(monkeypatch, index=None)
    assert util.gpu_util_percent is None
    assert util.unavailable["gpu"] == msg("no_cuda_device", error="RuntimeError: No CUDA GPUs are available")


def test_nvml_finds_a_mig_instance_by_its_mig_uuid(monkeypatch):
    util = _sample(monkeypatch, cuda=("22222222-cccc",), gpus=[("GPU-00000000-aaaa", 12), ("MIG-22222222-cccc", 55)])
    assert util.gpu_util_percent.median == 55


def test_unknown_uuid_is_no_gpu_sample_never_another_gpu(monkeypatch):
    util = _sample(monkeypatch, cuda=("99999999-ffff",))
    assert util.gpu_util_percent is None and util.unavailable["gpu"].code == "nvml_device_not_found"
    assert util.cpu_percent is not None


def test_no_nvml_degrades_to_host_only(monkeypatch):
    util = _sample(monkeypatch, fail_init=True)
    assert util.unavailable["gpu"].code == "nvml_unavailable"
    assert util.gpu_util_percent is None and util.cpu_percent is not None


def test_window_on_cpu_measures_each_step_and_data_wait(monkeypatch):
    # A simulated host clock: the claim is the bookkeeping (what is a data wait, what a step), exact on any machine;
    # with real sleeps a loaded machine overran a 10 ms sleep by more than the tolerance.
    from perfscope.measure import clock as clock_module

    class _Host:
        now = 100.0

        def perf_counter(self) -> float:
            return self.now

    host = _Host()
    monkeypatch.setattr(clock_module, "time", host)
    recorder = WindowRecorder(clock_for("cpu"), contention=False)
    recorder.start()
    for wait in (0.02, 0.03, 0.01):
        recorder.data_begin()
        host.now += wait  # next() blocks
        recorder.data_end()
        host.now += 0.01  # the step's compute
        recorder.step_end(samples=4)
    window, records = recorder.finish(), recorder.records
    assert len(records) == 3 and window.steps == 3 and window.samples == 12
    assert [r.data_wait_s for r in records] == pytest.approx([0.02, 0.03, 0.01])
    assert [r.time_s for r in records] == pytest.approx([0.03, 0.04, 0.02])
    assert window.wall_s == pytest.approx(0.09)
    assert window.data_wait_s == pytest.approx(window.host_data_wait_s)  # CPU work is synchronous: all wait is exposed
    assert window.data_wait_s == pytest.approx(0.06)


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


# ------------------------------------------------------------------------------------------ environment


def _fake_cuda(monkeypatch, devices: list[dict]) -> None:
    """torch.cuda as a CUDA build on a machine with ``devices`` visible (CPU torch cannot describe a GPU)."""
    props = [types.SimpleNamespace(name=d["name"], major=9, minor=0, total_memory=d.get("memory", 80 * 2**30),
                                   multi_processor_count=d.get("sms", 132), uuid=d["uuid"]) for d in devices]
    monkeypatch.setattr(torch.cuda, "device_count", lambda: len(devices))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: props[i].name)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i=0: props[i])


def test_environment_describes_the_device_the_run_uses_and_lists_all(monkeypatch):
    from perfscope.measure.environment import collect_environment

    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml())
    _fake_cuda(monkeypatch, [{"name": "NVIDIA A100-SXM4-80GB", "uuid": "00000000-aaaa", "sms": 108},
                             {"name": "NVIDIA H100 80GB HBM3", "uuid": "11111111-bbbb", "memory": 79 * 2**30}])
    env = collect_environment("cuda", device_index=1, measure_ceiling=False)
    assert env.device_name == "NVIDIA H100 80GB HBM3" and env.device_index == 1
    assert env.device_memory_bytes == 79 * 2**30 and env.datasheet_peaks_tflops["bf16"] == 989.4
    assert env.device_uuid == "GPU-11111111-bbbb" and env.driver_version == "575.51"
    assert env.device_count == 2 and len(env.visible_devices) == 2
    assert env.visible_devices[0].startswith("NVIDIA A100-SXM4-80GB") and "GPU-00000000-aaaa" in env.visible_devices[0]


def _cuda_env(monkeypatch, name: str, sms: int | None, uuid: str = "22222222-cccc", gpus=NVML_GPUS, measured=None):
    from perfscope.measure.environment import collect_environment

    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml(gpus=gpus))
    _fake_cuda(monkeypatch, [{"name": name, "uuid": uuid, "sms": sms}])
    env = collect_environment("cuda", measure_ceiling=False)
    env.measured_ceiling_tflops = measured or {}
    return env


def test_a_mig_slice_gets_its_sm_share_of_the_datasheet_peak(monkeypatch):
    """An A100 1g.5gb slice has 14 of the GPU's 108 SMs: the full GPU's 312 TFLOP/s would understate its MFU 7.7×."""
    from perfscope.measure.mfu import choose_peak

    env = _cuda_env(monkeypatch, "NVIDIA A100-SXM4-40GB MIG 1g.5gb", 14)
    assert env.mig and env.multiprocessor_count == 14
    assert "MIG-22222222-cccc" in env.visible_devices[0]
    assert env.datasheet_peaks_tflops["bf16"] == pytest.approx(312.0 * 14 / 108, abs=0.01)
    assert "14/108" in env.datasheet_source and "whitepaper" in env.datasheet_source  # the SM counts carry their source
    assert choose_peak(env).tflops == pytest.approx(40.44, abs=0.01)


def test_mig_detected_by_nvml_uuid_or_sm_count(monkeypatch):
    # The name does not say MIG, but NVML knows the device only by a MIG UUID:
    env = _cuda_env(monkeypatch, "NVIDIA H100 80GB HBM3", 16, gpus=[("MIG-22222222-cccc", 50)])
    assert env.mig and env.device_uuid == "MIG-22222222-cccc"
    assert env.datasheet_peaks_tflops["bf16"] == pytest.approx(989.4 * 16 / 132, abs=0.01)
    # No NVML answer, but fewer SMs than the datasheet GPU: scaled all the same.
    env = _cuda_env(monkeypatch, "NVIDIA H100 80GB HBM3", 32, gpus=[])
    assert env.datasheet_peaks_tflops["bf16"] == pytest.approx(989.4 * 32 / 132, abs=0.01)
    # The full GPUs are not scaled (the PCIe H100 has 114 SMs by design).
    assert _cuda_env(monkeypatch, "NVIDIA H100 PCIe", 114, gpus=[]).datasheet_peaks_tflops["bf16"] == 756.0
    assert not _cuda_env(monkeypatch, "NVIDIA H100 80GB HBM3", 132, gpus=[("GPU-22222222-cccc", 50)]).mig


def test_a_mig_slice_of_unknown_size_falls_back_to_the_measured_ceiling_with_the_reason(monkeypatch):
    from perfscope.measure.mfu import choose_peak

    env = _cuda_env(monkeypatch, "NVIDIA A100-SXM4-40GB MIG 3g.20gb", None, measured={"bf16": 120.0})
    assert env.datasheet_peaks_tflops == {}
    assert env.unavailable["datasheet_peaks_tflops"] == msg("slice_share_unknown", what="a MIG slice", gpu="NVIDIA A100")
    peak = choose_peak(env)
    assert peak.tflops == 120.0 and "MIG slice" in peak.source and "measured matmul ceiling" in peak.source


def test_calibration_makes_the_window_last_long_enough():
    from perfscope.results.config import TrialConfig
    from perfscope.trial.loop import calibrate_steps

    config = TrialConfig(micro_batch_size=8, min_window_s=0.5, min_steps=10, max_steps=2000)
    steps, why = calibrate_steps(config, [5.0, 0.01, 0.01, 0.012])  # the first warm-up step pays one-time costs
    assert steps == 50 and "0.5 s" in why
    assert calibrate_steps(config, [1.0, 0.2, 0.2])[0] == 10  # slow steps: at least min_steps
    assert calibrate_steps(config, [1e-6] * 4)[0] == 2000  # tiny steps: capped
    assert calibrate_steps(config.replace(steps=7), [0.01] * 4) == (7, "7 steps as asked (--steps)")
    with_workers = config.replace(num_workers=4, prefetch_factor=8)  # 32 batches in flight: span 3 queue cycles
    assert calibrate_steps(with_workers, [1.0, 0.2, 0.2])[0] == 96


def test_trials_drop_a_short_batch_at_the_end_of_an_epoch():
    """An IterableDataset keeps its short last batch (no drop_last): a new shape would recompile inside the window."""
    from perfscope.results.config import TrialConfig
    from perfscope.trial.data import endless_batches
    from perfscope.workload import Workload

    class Ten(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter([(torch.zeros(2), 0)] * 10)

    workload = Workload(model=lambda: nn.Linear(2, 1), dataset=Ten, loss=lambda m, b: m(b[0]).sum(), batch_size=4)
    batches = endless_batches(workload, TrialConfig(micro_batch_size=4))
    sizes = [next(batches)[0].shape[0] for _ in range(6)]  # epochs of 4, 4, (2 dropped)
    assert sizes == [4] * 6
    short = Workload(model=lambda: nn.Linear(2, 1), batches=lambda n: iter([torch.zeros(n, 2), torch.zeros(1, 2)]),
                     loss=lambda m, b: m(b).sum(), batch_size=4)
    assert [b.shape[0] for _, b in zip(range(3), endless_batches(short, TrialConfig(micro_batch_size=4)))] == [4, 4, 4]


def _nulls_without_reason(env) -> list[str]:
    import dataclasses

    alias = {"datasheet_source": "datasheet_peaks_tflops"}
    return [f.name for f in dataclasses.fields(env)
            if getattr(env, f.name) is None and alias.get(f.name, f.name) not in env.unavailable]


def test_every_null_of_a_cpu_environment_has_its_reason():
    from perfscope.measure.environment import collect_environment

    env = collect_environment("cpu", measure_ceiling=False)
    assert _nulls_without_reason(env) == []
    assert env.driver_version is None and env.unavailable["driver_version"].code == "cpu_not_applicable"
    assert env.cuda_version is None and "cuda_version" in env.unavailable


def test_unreadable_cpu_facts_are_null_with_a_reason_not_stand_ins(monkeypatch):
    import builtins
    import platform

    import psutil

    from perfscope.measure.environment import collect_environment

    real_open = builtins.open

    def no_cpuinfo(path, *args, **kwargs):
        if path == "/proc/cpuinfo":
            raise PermissionError(13, "Permission denied")
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", no_cpuinfo)
    monkeypatch.setattr(platform, "processor", lambda: platform.machine())
    monkeypatch.setattr(psutil, "cpu_count", lambda logical=True: None)
    env = collect_environment("cpu", measure_ceiling=False)
    assert env.cpu_model is None and env.unavailable["cpu_model"].code == "cpu_model_unknown"  # "x86_64" is not a CPU model
    assert env.cpu_cores_physical is None and env.cpu_cores_logical is None
    assert _nulls_without_reason(env) == []


def test_driver_and_cuda_versions_without_nvml_or_a_cuda_build_are_null_with_reasons(monkeypatch):
    from perfscope.measure.environment import collect_environment

    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails: no NVML
    monkeypatch.setattr(torch.version, "cuda", None)
    _fake_cuda(monkeypatch, [{"name": "NVIDIA H100 80GB HBM3", "uuid": "11111111-bbbb"}])
    env = collect_environment("cuda", measure_ceiling=False)
    assert env.driver_version is None and env.unavailable["driver_version"].code == "nvml_unavailable"
    assert env.cuda_version is None and env.unavailable["cuda_version"] == msg("no_cuda_build")
    assert _nulls_without_reason(env) == []


def test_exposed_data_wait_on_cuda_comes_from_the_device_timeline():
    """On a GPU the host may wait on the loader while queued work keeps the device busy: only the device-timeline
    gap between the events around next() is exposed wait (issue 11 #10). A fake event clock stands in for CUDA."""

    class FakeCudaClock:
        device_type = "cuda"
        now = staticmethod(time.perf_counter)  # the host's own waits

        def __init__(self) -> None:
            self.t = 0.0

        def mark(self) -> float:
            return self.t

        def ready(self, mark: float) -> bool:
            return True

        def wait(self, mark: float) -> None:
            pass

        def elapsed_s(self, start: float, end: float) -> float:
            return end - start

    clock = FakeCudaClock()
    recorder = WindowRecorder(clock, contention=False)  # type: ignore[arg-type]
    recorder.start()
    for hidden in (True, False):
        recorder.data_begin()
        time.sleep(0.01)  # the host waits 10 ms either way
        clock.t += 0.0 if hidden else 0.01  # device timeline: no gap when queued work covered the wait
        recorder.data_end()
        clock.t += 0.02  # the step's device work
        recorder.step_end(samples=1)
    window = recorder.finish()
    first, second = recorder.records
    assert first.data_wait_s == 0.0 and second.data_wait_s == pytest.approx(0.01)
    assert first.host_data_wait_s >= 0.01 and second.host_data_wait_s >= 0.01
    assert window.data_wait_s == pytest.approx(0.01) and window.host_data_wait_s >= 0.02
    assert window.wall_s == pytest.approx(0.05)


def test_numa_nodes_count_the_nodes_with_cpus(tmp_path):
    from perfscope.measure.environment import numa_nodes

    for name, cpus in (("node0", "0-31\n"), ("node1", "32-63\n"), ("node2", "\n")):  # node2: memory only (GH200, CXL)
        (tmp_path / name).mkdir()
        (tmp_path / name / "cpulist").write_text(cpus)
    (tmp_path / "possible").write_text("0-2\n")
    assert numa_nodes(tmp_path, "linux") == (2, None)
    assert numa_nodes(tmp_path / "absent", "linux")[0] is None and numa_nodes(tmp_path / "absent", "linux")[1].code == "unreadable"
    assert numa_nodes(tmp_path, "darwin") == (None, msg("numa_not_linux", system="darwin"))
    (tmp_path / "empty").mkdir()
    assert numa_nodes(tmp_path / "empty", "linux")[1] == msg("numa_no_cpus", path=str(tmp_path / "empty"))


def test_environment_records_numa_nodes_or_why_not(monkeypatch):
    import perfscope.measure.environment as environment

    monkeypatch.setattr(environment, "numa_nodes", lambda: (None, msg("numa_not_linux", system="win32")))
    env = environment.collect_environment("cpu", measure_ceiling=False)
    assert env.numa_nodes is None and env.unavailable["numa_nodes"] == msg("numa_not_linux", system="win32")
    monkeypatch.setattr(environment, "numa_nodes", lambda: (2, None))
    env = environment.collect_environment("cpu", measure_ceiling=False)
    assert env.numa_nodes == 2 and "numa_nodes" not in env.unavailable
