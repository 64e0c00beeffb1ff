"""The memory and recipe levers inside the trial: the optimizer a trial really steps, offloading, state bytes.

Fast tests build the optimizer and the train step in this process (no trial subprocess); the `slow` ones run a
real trial process and check, from what it recorded, that the knob did what it says.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest
import torch
from torch import nn

from perfscope.measure.memory import optimizer_state_bytes
from perfscope.results import Environment, Results, WorkloadInfo
from perfscope.results.config import TrialConfig
from perfscope.trial.loop import TrainStep
from perfscope.trial.step import build_optimizer, optimizer_name
from perfscope.workload import Workload

WORKLOADS = Path(__file__).parent / "workloads"


def _workload(optimizer=lambda params: torch.optim.AdamW(params, lr=3e-4)) -> Workload:
    def batches(n: int):
        g = torch.Generator().manual_seed(0)
        while True:
            yield torch.randn(n, 16, generator=g), torch.randint(0, 4, (n,), generator=g)

    return Workload(model=lambda: nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)), batches=batches,
                    loss=lambda m, b: nn.functional.cross_entropy(m(b[0]), b[1]), optimizer=optimizer, batch_size=4)


def _model() -> nn.Module:
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))


def test_adafactor_replaces_adamw_keeping_each_groups_lr_and_weight_decay():
    model = _model()

    def two_groups(params):
        params = list(params)
        return torch.optim.AdamW([{"params": params[:2], "lr": 1e-3}, {"params": params[2:], "weight_decay": 0.0}],
                                 lr=3e-4, weight_decay=0.05, betas=(0.8, 0.9))

    opt = build_optimizer(_workload(two_groups), model, TrialConfig(micro_batch_size=4, optimizer="adafactor"))
    assert type(opt) is torch.optim.Adafactor and optimizer_name(opt) == "torch.optim.Adafactor"
    assert [(g["lr"], g["weight_decay"]) for g in opt.param_groups] == [(1e-3, 0.05), (3e-4, 0.0)]
    assert [len(g["params"]) for g in opt.param_groups] == [2, 2]
    assert opt.param_groups[0]["beta2_decay"] == -0.8  # no counterpart of AdamW's betas: Adafactor's default
    assert build_optimizer(_workload(), model, TrialConfig(micro_batch_size=4, optimizer="adafactor",
                                                           optimizer_impl="foreach")).param_groups[0]["foreach"] is True
    with pytest.raises(ValueError, match="no fused implementation"):
        build_optimizer(_workload(), model, TrialConfig(micro_batch_size=4, optimizer="adafactor", optimizer_impl="fused"))


def test_the_users_optimizer_is_kept_or_rebuilt_with_its_implementation_flag():
    model = _model()
    assert type(build_optimizer(_workload(), model, TrialConfig(micro_batch_size=4))) is torch.optim.AdamW
    fused = build_optimizer(_workload(), model, TrialConfig(micro_batch_size=4, optimizer_impl="foreach"))
    assert type(fused) is torch.optim.AdamW and fused.param_groups[0]["foreach"] is True and fused.param_groups[0]["lr"] == 3e-4


@pytest.mark.parametrize(("choice", "module"), [("8bit-torchao", "torchao.optim"), ("8bit-bnb", "bitsandbytes.optim")])
def test_8bit_optimizer_is_the_installed_implementations_counterpart_with_every_hyper_parameter(monkeypatch, choice, module):
    made = {}

    class Fake8bit(torch.optim.Optimizer):
        def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False):
            super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad))
            made["groups"] = self.param_groups

    fake = types.ModuleType(module)
    fake.AdamW8bit = fake.Adam8bit = Fake8bit  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module, fake)
    workload = _workload(lambda p: torch.optim.AdamW(p, lr=2e-4, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.1))
    opt = build_optimizer(workload, _model(), TrialConfig(micro_batch_size=4, optimizer=choice))
    assert type(opt) is Fake8bit
    (group,) = made["groups"]
    assert (group["lr"], group["betas"], group["eps"], group["weight_decay"], group["amsgrad"]) == (2e-4, (0.8, 0.95), 1e-6, 0.1, False)
    sgd = _workload(lambda p: torch.optim.SGD(p, lr=0.1))
    with pytest.raises(ValueError, match="no 8-bit counterpart of SGD"):
        build_optimizer(sgd, _model(), TrialConfig(micro_batch_size=4, optimizer=choice))


def test_8bit_optimizer_missing_at_run_time_is_an_error_naming_what_was_tried(monkeypatch):
    for name in ("torchao", "torchao.optim"):
        monkeypatch.setitem(sys.modules, name, None)  # import raises ImportError
    with pytest.raises(ImportError, match=r"torchao\.optim"):
        build_optimizer(_workload(), _model(), TrialConfig(micro_batch_size=4, optimizer="8bit-torchao"))


def test_offloading_wraps_the_forward_in_save_on_cpu(monkeypatch):
    entered = []
    real = torch.autograd.graph.save_on_cpu

    def recording(pin_memory: bool = False, device_type: str = "cuda"):
        entered.append(pin_memory)
        return real(pin_memory=False)  # this CPU-only torch cannot pin memory

    monkeypatch.setattr(torch.autograd.graph, "save_on_cpu", recording)
    step = TrainStep(_workload(), TrialConfig(micro_batch_size=4, grad_accum_steps=2, offload_activations=True))
    step()
    assert entered == [True, True]  # every micro-step's forward, pinned
    TrainStep(_workload(), TrialConfig(micro_batch_size=4))()
    assert entered == [True, True]  # off: untouched


def test_state_held_by_a_tensor_subclass_is_counted_by_its_inner_tensors():
    """torchao keeps 8-bit moments in a wrapper subclass whose own storage is not the bytes it holds."""

    class Quantized(torch.Tensor):
        @staticmethod
        def __new__(cls, codes: torch.Tensor, scale: torch.Tensor):
            return torch.Tensor._make_wrapper_subclass(cls, codes.shape, dtype=torch.float32)

        def __init__(self, codes: torch.Tensor, scale: torch.Tensor) -> None:
            self.codes, self.scale = codes, scale

        def __tensor_flatten__(self):
            return ["codes", "scale"], None

        @classmethod
        def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
            raise NotImplementedError(func)

    param = nn.Parameter(torch.zeros(1024))
    opt = torch.optim.SGD([param], lr=0.1)
    opt.state[param] = {"exp_avg": Quantized(torch.zeros(1024, dtype=torch.uint8), torch.zeros(4)), "step": torch.tensor(1.0)}
    assert optimizer_state_bytes(opt) == 1024 + 4 * 4 + 4


def _numerics_run(name: str, *, optimizer: str = "user", shift: float = 0.0, grad_norm: float = 1.0, micro: int = 8):
    from tests.factories import make_trial

    trial = make_trial(name, batch=micro)
    trial.config = trial.config.replace(optimizer=optimizer)
    trial.metrics.losses = [2.0 - 0.01 * i + shift for i in range(20)]
    trial.metrics.first_grad_norm = grad_norm
    return trial


def test_the_numerics_guard_asks_a_new_optimizer_only_what_its_steps_can_answer():
    from perfscope.search.numerics import compare_numerics

    base = _numerics_run("baseline")
    # Losses 5% apart: a failure for the same optimizer (2% per step), expected of another one.
    assert not compare_numerics(base, _numerics_run("fused", shift=0.1)).ok
    assert compare_numerics(base, _numerics_run("adafactor", optimizer="adafactor", shift=0.06)).ok
    assert compare_numerics(base, _numerics_run("adafactor", optimizer="adafactor", shift=-0.5)).ok  # lower: no fault
    worse = compare_numerics(base, _numerics_run("adafactor", optimizer="adafactor", shift=0.2))
    assert not worse.ok and worse.reason is not None and worse.reason.code == "numerics_recipe_loss"
    # The first gradient is taken before any optimizer step: a different one means another model or loss.
    other_model = compare_numerics(base, _numerics_run("adafactor", optimizer="adafactor", grad_norm=1.2))
    assert not other_model.ok and other_model.reason is not None and other_model.reason.code == "numerics_recipe_grad_norm"
    # At another micro-batch with the same global batch the gradient's composition may differ a little (25%).
    accumulating = _numerics_run("baseline")
    accumulating.metrics.grad_accum_steps, accumulating.metrics.samples_per_step = 2, 16
    assert compare_numerics(accumulating, _numerics_run("adamw_8bit-mb16", optimizer="8bit-bnb", grad_norm=1.2, micro=16)).ok
    assert not compare_numerics(accumulating, _numerics_run("adamw_8bit-mb16", optimizer="8bit-bnb", grad_norm=1.5, micro=16)).ok


# ------------------------------------------------------------------------------------------- real trials


@pytest.mark.slow
def test_an_adafactor_trial_really_steps_adafactor_and_frees_the_state(tmp_path):
    from perfscope.measure.mfu import choose_peak
    from perfscope.search.numerics import compare_numerics
    from perfscope.trial.session import Progress, Session

    results = Results(environment=Environment(device_type="cpu", device_name="test cpu", measured_ceiling_tflops={"fp32": 0.1}),
                      workload=WorkloadInfo(path=str(WORKLOADS / "mlp.py"), sha256="x", name="mlp"))
    results.peak = choose_peak(results.environment)
    session = Session(results, out_dir=tmp_path, workload_path=WORKLOADS / "mlp.py", timeout_s=120, progress=Progress(),
                      contention_retries=0)
    config = TrialConfig(micro_batch_size=8, steps=6, warmup_steps=2)
    baseline = session.measure("baseline", config)
    adafactor = session.measure("adafactor", config.replace(optimizer="adafactor"), ["adafactor"])
    assert baseline.ok and adafactor.ok, (baseline.error, adafactor.error)
    assert baseline.metrics.optimizer == "torch.optim.adamw.AdamW"
    assert adafactor.metrics.optimizer == "torch.optim.Adafactor"  # the knob did not silently keep AdamW
    params = adafactor.metrics.memory_breakdown.parameters
    assert baseline.metrics.memory_breakdown.optimizer_state >= 2 * params  # AdamW: two moments per parameter
    assert adafactor.metrics.memory_breakdown.optimizer_state < params / 4  # factored: rows and columns
    assert adafactor.metrics.first_grad_norm == pytest.approx(baseline.metrics.first_grad_norm)  # before any update
    assert adafactor.metrics.losses != baseline.metrics.losses  # then it trains with another optimizer
    assert compare_numerics(baseline, adafactor).ok
    saved = Results.load(tmp_path / "results.json").trial("adafactor")
    assert saved.config.optimizer == "adafactor" and saved.metrics.optimizer == "torch.optim.Adafactor"
