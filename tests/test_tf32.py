"""Matmul TF32: read on every torch without raising (the new fp32_precision API makes the legacy read raise),
the user's own setting kept and recorded by the baseline, cuDNN's TF32 never touched, ceilings restored."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from torch import nn

from perfscope.measure.peaks import measure_matmul_tflops
from perfscope.measure.tf32 import (
    enable_tf32_code,
    matmul_tf32,
    matmul_tf32_as,
    set_matmul_tf32,
)
from perfscope.results.config import TrialConfig
from perfscope.trial.loop import run_trial
from perfscope.workload import Workload

matmul = torch.backends.cuda.matmul
conv = torch.backends.cudnn.conv


@pytest.fixture(autouse=True)
def pristine_tf32() -> Iterator[None]:
    """Tests here change process-global TF32 flags: put back the legacy flags first, then the new-API
    values, which leaves the two consistent (an inconsistent pair makes every later legacy read raise)."""
    saved_new = (matmul.fp32_precision, conv.fp32_precision)
    saved_legacy = (bool(matmul.allow_tf32), bool(torch.backends.cudnn.allow_tf32))
    yield
    matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved_legacy
    matmul.fp32_precision, conv.fp32_precision = saved_new


def test_new_api_state_is_read_where_the_legacy_flag_raises():
    matmul.fp32_precision = "tf32"
    with pytest.raises(RuntimeError):  # what torch 2.13 does to every reader of the old flag
        _ = matmul.allow_tf32
    assert matmul_tf32().enabled is True
    matmul.fp32_precision = "ieee"
    assert matmul_tf32().enabled is False


def test_a_mixed_state_torch_refuses_to_resolve_is_unknown_with_a_reason():
    matmul.allow_tf32 = True
    matmul.fp32_precision = "none"
    state = matmul_tf32()
    assert state.enabled is None and state.reason and "torch cannot tell" in state.reason


def test_setting_uses_the_new_api_and_restores_it():
    set_matmul_tf32(True)
    assert matmul.fp32_precision == "tf32"
    with matmul_tf32_as(False):
        assert matmul_tf32().enabled is False
    assert matmul.fp32_precision == "tf32"


def test_measured_ceiling_survives_the_new_api():
    matmul.fp32_precision = "tf32"  # the user's loop follows torch's current advice
    assert measure_matmul_tflops("cpu", "fp32", size=32, repeats=1) > 0  # before: RuntimeError reading allow_tf32
    assert matmul.fp32_precision == "tf32"


def _workload() -> Workload:
    return Workload(
        model=lambda: nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2)),
        batches=lambda n: iter(lambda: (torch.randn(n, 8), torch.randint(0, 2, (n,))), None),
        loss=lambda model, b: nn.functional.cross_entropy(model(b[0]), b[1]),
        batch_size=4,
    )


FAST = {"micro_batch_size": 4, "steps": 2, "warmup_steps": 0, "count_flops": False, "sample_utilization": False}


def test_baseline_keeps_and_records_the_users_tf32_and_leaves_cudnn_alone():
    matmul.fp32_precision = "tf32"  # what the user's file set
    assert TrialConfig(micro_batch_size=4).tf32 is None  # the baseline's default: leave it as the user set it
    metrics = run_trial(_workload(), TrialConfig(**FAST)).metrics
    assert metrics.matmul_tf32 is True
    assert matmul.fp32_precision == "tf32"  # not overwritten
    assert conv.fp32_precision == "tf32"  # cuDNN's default (TF32 on) untouched


def test_an_explicit_setting_is_applied_with_the_new_api():
    metrics = run_trial(_workload(), TrialConfig(**FAST, tf32=True)).metrics
    assert metrics.matmul_tf32 is True and matmul.fp32_precision == "tf32"
    metrics = run_trial(_workload(), TrialConfig(**FAST, tf32=False)).metrics
    assert metrics.matmul_tf32 is False and matmul.fp32_precision == "ieee"
    assert conv.fp32_precision == "tf32"


@pytest.mark.parametrize(("version", "expected"), [("2.13.0+cu128", "fp32_precision = \"tf32\""), ("2.9.0", "fp32_precision"),
                                                   ("2.4.1+cu121", "allow_tf32 = True"), ("2.8.0", "allow_tf32 = True")])
def test_recommended_code_follows_the_runs_torch_version(version, expected):
    code = enable_tf32_code(version)
    assert code.startswith("+") and expected in code
    assert "cudnn" not in code


def test_the_knobs_see_the_tf32_setting_of_the_users_file(tmp_path):
    from perfscope.trial.inspect import inspect_model
    from perfscope.workload import load_workload

    path = tmp_path / "user_tf32.py"
    path.write_text(
        "import torch, perfscope\n"
        "torch.backends.cuda.matmul.fp32_precision = 'tf32'\n"
        "def workload():\n"
        "    return perfscope.Workload(model=lambda: torch.nn.Linear(4, 2), batches=lambda n: iter([]),\n"
        "                              loss=lambda m, b: m(b).sum(), batch_size=2)\n"
    )
    assert inspect_model(load_workload(path)).matmul_tf32 is True
