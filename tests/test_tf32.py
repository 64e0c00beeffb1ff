"""Matmul TF32: read on every torch without raising (the new fp32_precision API makes the legacy read raise),
the user's own setting kept and recorded by the baseline, cuDNN's TF32 never touched, ceilings restored."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from torch import nn

from perfscope import tf32_api as api_module
from perfscope.measure.peaks import measure_matmul_tflops
from perfscope.results.config import TrialConfig
from perfscope.snippets import tf32_change
from perfscope.tf32_api import (
    LEGACY_ONLY,
    MIXED_CHECK,
    NEW_ONLY,
    matmul_tf32,
    probe_installed_torch,
    restore_matmul_tf32,
    set_matmul_tf32,
    snapshot_matmul_tf32,
    tf32_api,
)
from perfscope.trial.loop import run_trial
from perfscope.workload import Workload

matmul = torch.backends.cuda.matmul
conv = torch.backends.cudnn.conv


@pytest.fixture(autouse=True)
def pristine_tf32() -> Iterator[None]:
    """Tests here change process-global TF32 flags: put back both matmul states (legacy first, then each backend's
    new-API value, perfscope.tf32_api.restore_matmul_tf32) and cuDNN's, so no test leaves the mixed state behind."""
    saved, saved_conv = snapshot_matmul_tf32(), (bool(torch.backends.cudnn.allow_tf32), conv.fp32_precision)
    yield
    torch.backends.cudnn.allow_tf32, conv.fp32_precision = saved_conv
    restore_matmul_tf32(saved)


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


def _legacy_reads() -> tuple[bool, str]:
    """What torch.compile reads on torch 2.9-2.13 (inductor's lowerings and autotune cache, dynamo): raises when mixed."""
    return bool(matmul.allow_tf32), torch.get_float32_matmul_precision()


def test_setting_leaves_every_reader_able_to_read_it_and_restores_it():
    set_matmul_tf32(True)
    assert matmul.fp32_precision == "tf32" and _legacy_reads() == (True, "high")  # before: the legacy read raised
    snapshot = snapshot_matmul_tf32()
    set_matmul_tf32(False)
    assert matmul_tf32().enabled is False and _legacy_reads() == (False, "highest")
    restore_matmul_tf32(snapshot)
    assert matmul.fp32_precision == "tf32" and _legacy_reads() == (True, "high")


def test_the_installed_torch_refuses_legacy_reads_after_the_new_setter_so_the_legacy_setter_is_chosen():
    # The fact the decision rests on, checked on the installed torch (2.13): if a torch lifts the check, the
    # probe answers NEW_ONLY and this test says so.
    assert probe_installed_torch() == MIXED_CHECK
    assert api_module.legacy_read_refused_after_new_setter() is True
    assert tf32_api() == tf32_api(torch.__version__) == MIXED_CHECK


@pytest.mark.parametrize("start", ["default", "legacy_on", "new_ieee", "medium", "mixed"])
def test_the_probe_and_a_snapshot_put_every_flag_back(start):
    if start == "legacy_on":
        matmul.allow_tf32 = True
    elif start == "new_ieee":
        matmul.fp32_precision = "ieee"
    elif start == "medium":
        torch.set_float32_matmul_precision("medium")
    elif start == "mixed":
        matmul.fp32_precision = "tf32"  # the user's file used the new API alone
    before = snapshot_matmul_tf32()
    assert api_module.legacy_read_refused_after_new_setter() is True
    assert snapshot_matmul_tf32() == before
    set_matmul_tf32(start != "legacy_on")
    restore_matmul_tf32(before)
    assert snapshot_matmul_tf32() == before
    assert (before.legacy is None) == (start == "mixed")


@pytest.fixture
def probe(monkeypatch: pytest.MonkeyPatch):
    """Pretend the installed torch probes as ``api`` (cached probe bypassed)."""

    def use(api):
        monkeypatch.setattr(api_module, "probe_installed_torch", lambda: api)

    return use


def test_a_torch_without_the_mixed_check_is_set_and_advised_with_the_new_api(probe):
    probe(NEW_ONLY)
    set_matmul_tf32(True)
    assert matmul.fp32_precision == "tf32"
    with pytest.raises(RuntimeError):  # the new setter alone was used (the installed torch does check)
        _ = matmul.allow_tf32
    assert tf32_change(tf32_api()) == '+torch.backends.cuda.matmul.fp32_precision = "tf32"'


@pytest.mark.parametrize("api", [LEGACY_ONLY, MIXED_CHECK])
def test_a_torch_that_needs_the_legacy_setter_is_set_and_advised_with_it(probe, api):
    probe(api)
    set_matmul_tf32(True)
    assert _legacy_reads() == (True, "high")
    code = tf32_change(tf32_api())
    assert code.startswith("+torch.backends.cuda.matmul.allow_tf32 = True")
    assert ("pytorch#166387" in code) == api.has_new_api  # a torch >= 2.9 user is told why not the new setter


def test_the_probe_without_the_new_api_is_legacy_only(monkeypatch):
    monkeypatch.setattr(api_module, "has_new_api", lambda: False)
    probe_installed_torch.cache_clear()
    try:
        assert probe_installed_torch() == LEGACY_ONLY
    finally:
        probe_installed_torch.cache_clear()


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


def test_an_explicit_setting_is_applied_so_that_legacy_readers_agree():
    metrics = run_trial(_workload(), TrialConfig(**FAST, tf32=True)).metrics
    assert metrics.matmul_tf32 is True and matmul.fp32_precision == "tf32" and _legacy_reads() == (True, "high")
    metrics = run_trial(_workload(), TrialConfig(**FAST, tf32=False)).metrics
    assert metrics.matmul_tf32 is False and matmul.fp32_precision == "ieee" and _legacy_reads() == (False, "highest")
    assert conv.fp32_precision == "tf32"


@pytest.mark.parametrize(("version", "expected"), [("2.10.0+cu128", MIXED_CHECK), ("2.9.0", MIXED_CHECK),
                                                   ("2.4.1+cu121", LEGACY_ONLY), ("2.8.0", LEGACY_ONLY)])
def test_a_recorded_runs_torch_is_decided_from_its_version(version, expected, probe):
    probe(NEW_ONLY)  # never consulted for another torch
    assert tf32_api(version) == expected
    code = tf32_change(tf32_api(version))
    assert code.startswith("+torch.backends.cuda.matmul.allow_tf32 = True") and "cudnn" not in code


def test_the_installed_torchs_version_is_probed_not_parsed(probe):
    probe(NEW_ONLY)
    assert tf32_api(torch.__version__) == NEW_ONLY and tf32_api(None) == NEW_ONLY and tf32_api("") == NEW_ONLY


def test_the_knobs_see_the_tf32_setting_of_the_users_file(tmp_path):
    from perfscope.trial.validate import inspect_model
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
