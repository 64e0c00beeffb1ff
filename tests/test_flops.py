"""FLOP counts against analytic formulas; MFU/HFU arithmetic; peak lookup."""

import importlib.util
from pathlib import Path

import pytest
import torch
from torch import nn

from perfscope.hardware import datasheet_peak
from perfscope.measure.mfu import apply_utilization_ratios, choose_peak
from perfscope.results import Environment
from perfscope.results.config import TrialConfig
from perfscope.results.messages import Message, msg
from perfscope.trial.loop import TrainStep
from perfscope.workload import Workload, load_workload
from tests.factories import make_trial
from tests.flops_oracle import linear_training_flops, transformer_training_flops_per_token

ROOT = Path(__file__).parent.parent


def _mlp_workload(batch: int) -> Workload:
    return Workload(
        model=lambda: nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10)),
        batches=lambda n: iter(lambda: (torch.randn(n, 32), torch.randint(0, 10, (n,))), None),
        loss=lambda model, b: nn.functional.cross_entropy(model(b[0]), b[1]),
        batch_size=batch,
    )


def test_mlp_flops_are_exact():
    step = TrainStep(_mlp_workload(8), TrialConfig(micro_batch_size=8))
    model_flops, hardware_flops, _ = step.count_flops()
    expected = linear_training_flops(8, 32, 64, input_requires_grad=False) + linear_training_flops(8, 64, 10, input_requires_grad=True)
    assert model_flops == expected == 96256
    assert hardware_flops == model_flops  # no recompute without checkpointing


def test_accumulation_multiplies_flops_per_optimizer_step():
    one = TrainStep(_mlp_workload(8), TrialConfig(micro_batch_size=8)).count_flops()[0]
    four = TrainStep(_mlp_workload(8), TrialConfig(micro_batch_size=8, grad_accum_steps=4)).count_flops()[0]
    assert four == 4 * one


def _tiny_gpt():
    wl = load_workload(ROOT / "examples" / "tiny_transformer.py")
    module = importlib.import_module(wl.model.__module__)
    return wl, module


def test_transformer_flops_match_6nd_plus_attention():
    wl, mod = _tiny_gpt()
    step = TrainStep(wl, TrialConfig(micro_batch_size=4))
    counted, hardware, notes = step.count_flops()
    model = mod.TinyGPT()
    matmul_params = sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear))
    tokens = 4 * mod.SEQ
    analytic = transformer_training_flops_per_token(
        n_params_non_embedding=matmul_params, n_layers=mod.N_LAYERS, d_model=mod.D_MODEL, seq_len=mod.SEQ
    ) * tokens
    # Model FLOPs leave out attention backward's QK^T recompute: exactly PaLM's 6·N + 12·L·d·T; HFU keeps it.
    assert counted == pytest.approx(analytic, rel=1e-9)
    assert hardware == pytest.approx(counted + 2 * mod.N_LAYERS * 4 * mod.SEQ * mod.SEQ * mod.D_MODEL, rel=1e-9)
    assert msg("cpu_sdpa_formula") in notes  # the CPU gap was detected and filled


def test_checkpointing_is_hfu_not_mfu():
    wl, mod = _tiny_gpt()
    plain = TrainStep(wl, TrialConfig(micro_batch_size=4)).count_flops()
    ckpt = TrainStep(wl, TrialConfig(micro_batch_size=4, activation_checkpointing=True)).count_flops()
    assert ckpt[0] == pytest.approx(plain[0])  # model FLOPs unchanged
    # HFU adds one forward of the blocks: more than the model FLOPs, less than 4/3 of them
    assert plain[0] < ckpt[1] < plain[0] * 4 / 3 + 1


def test_hardware_flops_are_what_the_checkpointed_step_ran():
    """Non-reentrant recompute stops early (a block's last op is not rerun when backward needs nothing it saves):
    HFU's FLOPs are those of the step as it ran, equal to the structural count of one real checkpointed step.
    Before: 'the blocks' whole forward again' overstated them (+29% against the +20% that ran)."""
    wl, _ = _tiny_gpt()
    step = TrainStep(wl, TrialConfig(micro_batch_size=4, activation_checkpointing=True))
    _, hardware_flops, notes = step.count_flops()
    ran = sum(step.count_structure().flops_by_op.values())
    assert hardware_flops == pytest.approx(ran, rel=1e-9)
    assert any(isinstance(n, Message) and n.code == "flops_checkpointing" for n in notes)


def test_mfu_arithmetic_uses_one_fixed_denominator():
    env = Environment(device_type="cuda", device_name="NVIDIA H100 80GB HBM3",
                      datasheet_peaks_tflops=dict(datasheet_peak("NVIDIA H100 80GB HBM3").tflops),
                      datasheet_source="H100 SXM", measured_ceiling_tflops={"bf16": 800.0, "fp32": 50.0})
    peak = choose_peak(env)
    assert (peak.dtype, peak.tflops) == ("bf16", 989.4)  # best dense dtype, even for an fp32 trial
    trial = make_trial(median_s=0.1, flops_per_step=4e13)
    trial.metrics.hardware_flops_per_step = 5e13
    apply_utilization_ratios(trial.metrics, peak, env)
    per_step = trial.metrics.mean_step_time_s  # wall / steps: work over the window's wall time, not a median
    assert per_step != pytest.approx(trial.metrics.typical_step.median, rel=1e-9)
    assert trial.metrics.mfu == pytest.approx(4e13 / per_step / 989.4e12)
    assert trial.metrics.hfu == pytest.approx(5e13 / per_step / 989.4e12)
    assert trial.metrics.hfu > trial.metrics.mfu
    assert trial.metrics.mfu_vs_measured_ceiling == pytest.approx(4e13 / per_step / 800e12)


def test_peak_override_and_unknown_device():
    env = Environment(device_type="cuda", device_name="Mystery GPU 9000", measured_ceiling_tflops={"bf16": 123.0})
    assert choose_peak(env, 400.0).source.startswith("--peak-tflops")
    fallback = choose_peak(env)
    assert fallback.tflops == 123.0 and "measured matmul ceiling" in fallback.source
    assert choose_peak(Environment(device_type="cuda", device_name="Mystery GPU 9000")) is None


@pytest.mark.parametrize(
    ("name", "expected", "bf16"),
    [
        ("NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM", 989.4),
        ("NVIDIA H100 PCIe", "NVIDIA H100 PCIe", 756.0),
        ("NVIDIA H100 NVL", "NVIDIA H100 NVL", 835.5),
        ("NVIDIA H200", "NVIDIA H200", 989.4),
        ("NVIDIA H200 NVL", "NVIDIA H200 NVL", 835.5),  # the PCIe card: lower clocks than the SXM part
        ("NVIDIA A100-SXM4-80GB", "NVIDIA A100", 312.0),
        ("NVIDIA L4", "NVIDIA L4", 121.0),
        ("NVIDIA A10G", "NVIDIA A10", 125.0),
        ("NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 4090", 165.2),
    ],
)
def test_datasheet_lookup_is_dense(name, expected, bf16):
    peak = datasheet_peak(name)
    assert peak.name == expected and peak.tflops["bf16"] == bf16


@pytest.mark.parametrize(
    ("name", "expected", "fp32", "fp16"),
    [  # the V100 datasheet's columns, as CUDA names the parts
        ("Tesla V100-SXM2-16GB", "NVIDIA V100", 15.7, 125.0),
        ("Tesla V100-SXM2-32GB", "NVIDIA V100", 15.7, 125.0),
        ("Tesla V100-PCIE-32GB", "NVIDIA V100 PCIe", 14.0, 112.0),
        ("Tesla V100-PCIE-16GB", "NVIDIA V100 PCIe", 14.0, 112.0),
        ("Tesla V100S-PCIE-32GB", "NVIDIA V100S PCIe", 16.4, 130.0),
    ],
)
def test_each_v100_form_factor_gets_its_own_column(name, expected, fp32, fp16):
    peak = datasheet_peak(name)
    assert (peak.name, peak.tflops) == (expected, {"fp32": fp32, "fp16": fp16})  # Volta: no bf16, no tf32
    assert "volta-v100-datasheet" in peak.source and expected.removeprefix("NVIDIA ") in peak.source


def test_v100_parts_with_other_clocks_get_no_guess():
    assert datasheet_peak("Tesla V100-FHHL-16GB") is None  # 150 W part: not the PCIe card's figures
    assert datasheet_peak("Tesla V100-SXM3-32GB") is None


def test_unknown_device_gets_no_guess():
    assert datasheet_peak("NVIDIA Tesla K80") is None
    assert datasheet_peak("NVIDIA L40S").name == "NVIDIA L40S"  # not mistaken for the L4


def test_cpu_sdpa_note_only_when_the_cpu_formula_was_used():
    """A CUDA run's attention (flash/efficient kernels, torch's own formulas) must not carry the CPU-SDPA note."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from perfscope.measure.flops import StepFlopCounter

    with FakeTensorMode():  # CUDA tensors without a GPU: shapes only
        q = torch.empty(2, 4, 16, 8, device="cuda")
        with StepFlopCounter() as counter:
            torch.ops.aten._scaled_dot_product_efficient_attention(q, q, q, None, False)
    assert counter.total > 0
    assert msg("cpu_sdpa_formula") not in counter.notes
    q = torch.randn(2, 4, 16, 8)
    with StepFlopCounter() as counter:
        torch.nn.functional.scaled_dot_product_attention(q, q, q)
    assert msg("cpu_sdpa_formula") in counter.notes  # the CPU kernel, counted with the formula we register


# ------------------------------------------------------------------ counting without the memory of a real step


class _Capacity(nn.Module):
    """Stands in for a GPU's memory: a real step with more than ``fits`` samples raises the OOM it would raise
    there; fake tensors (shapes only) pass. Adds no FLOPs."""

    def __init__(self, fits: int) -> None:
        super().__init__()
        self.fits = fits

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from torch._subclasses.fake_tensor import FakeTensor

        if not isinstance(x, FakeTensor) and x.shape[0] > self.fits:
            raise torch.OutOfMemoryError(f"CUDA out of memory (simulated: {x.shape[0]} samples, {self.fits} fit)")
        return x


def _capped_mlp(fits: int, data_dependent_loss: bool = False) -> Workload:
    def loss(model, b):
        out = model(b[0])
        value = nn.functional.cross_entropy(out, b[1])
        if data_dependent_loss:  # boolean-mask indexing: an output shape fake tensors cannot know
            value = value + out[out > 1e9].sum()
        return value

    return Workload(
        model=lambda: nn.Sequential(_Capacity(fits), nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10)),
        batches=lambda n: iter(lambda: (torch.randn(n, 32), torch.randint(0, 10, (n,))), None),
        loss=loss,
        batch_size=8,
    )


def _mlp_flops(batch: int) -> int:
    return linear_training_flops(batch, 32, 64, input_requires_grad=False) + linear_training_flops(batch, 64, 10, input_requires_grad=True)


def test_flops_are_counted_without_the_memory_of_the_micro_batch():
    """The count runs on fake tensors: a micro-batch the device could not hold for an eager step still counts, exactly."""
    step = TrainStep(_capped_mlp(fits=4), TrialConfig(micro_batch_size=64))
    model_flops, hardware_flops, notes = step.count_flops()  # before: torch.OutOfMemoryError at 64 samples
    assert model_flops == hardware_flops == _mlp_flops(64)
    assert notes[0] == msg("flops_fake_tensors", micro=64)  # the counting method
    assert all(p.grad is None for p in step.model.parameters())  # the real model was not touched


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.fc(x))


class _Stack(nn.Module):
    def __init__(self, fits: int) -> None:
        super().__init__()
        self.cap = _Capacity(fits)
        self.blocks = nn.ModuleList(_Block() for _ in range(3))
        self.head = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.cap(x)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def test_checkpointing_pair_counts_mfu_and_hfu_at_twice_the_micro_batch_that_fit():
    """The sweep's pair: checkpointing at twice the largest micro-batch that fit without it. The count runs the blocks
    un-checkpointed (model FLOPs), which a real step could not hold; on fake tensors it can."""
    workload = Workload(
        model=lambda: _Stack(fits=8),
        batches=lambda n: iter(lambda: (torch.randn(n, 16), torch.randint(0, 4, (n,))), None),
        loss=lambda model, b: nn.functional.cross_entropy(model(b[0]), b[1]),
        batch_size=8,
    )
    model_flops, hardware_flops, _ = TrainStep(workload, TrialConfig(micro_batch_size=16, activation_checkpointing=True)).count_flops()
    b = 16
    blocks_forward = 3 * 2 * b * 16 * 16
    expected = (linear_training_flops(b, 16, 16, input_requires_grad=False)  # first block: no input grad
                + 2 * linear_training_flops(b, 16, 16, input_requires_grad=True)
                + linear_training_flops(b, 16, 4, input_requires_grad=True))
    assert model_flops == expected
    assert hardware_flops == expected + blocks_forward  # HFU: the blocks' forward once more


def test_where_fake_tensors_fail_a_small_real_step_is_counted_and_scaled():
    step = TrainStep(_capped_mlp(fits=4, data_dependent_loss=True), TrialConfig(micro_batch_size=64))
    model_flops, _, notes = step.count_flops()
    assert model_flops == _mlp_flops(64)  # exact: these FLOPs are linear in the batch
    method = notes[0]  # the counting method
    assert method.code == "flops_fake_failed" and (method.params["small"], method.params["scale"]) == (2, 32), notes
    assert all(p.grad is None for p in step.model.parameters())
