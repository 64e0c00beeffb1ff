"""Every contract violation gets a clear error naming the file (and line where it applies), exit code 2."""

from pathlib import Path

import pytest

from perfscope.cli import main
from perfscope.errors import WorkloadError
from perfscope.trial.validate import validate_workload
from perfscope.workload import Workload, load_workload

WORKLOADS = Path(__file__).parent / "workloads"


def _load_and_validate(name: str) -> None:
    path = WORKLOADS / name
    validate_workload(load_workload(path), path)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("missing.py", r"missing\.py: no such file"),
        ("broken_syntax.py", r"broken_syntax\.py:\d+: syntax error"),
        ("broken_import.py", r"broken_import\.py:2: importing the file raised ModuleNotFoundError"),
        ("no_workload.py", r"no_workload\.py: defines no workload\(\) function"),
        ("wrong_return.py", r"wrong_return\.py: workload\(\) returned dict, expected perfscope\.Workload"),
        ("non_scalar_loss.py", r"returned a tensor of shape \(2, 3\), expected a scalar"),
        ("bad_dataset.py", r"bad_dataset\.py:13: dataset\[3\] raised KeyError"),
    ],
)
def test_contract_violation_names_file_and_line(name, expected):
    with pytest.raises(WorkloadError, match=expected):
        _load_and_validate(name)


def test_healthy_workload_validates():
    _load_and_validate("mlp.py")


def test_cli_reports_user_errors_with_exit_code_2(capsys, tmp_path):
    code = main(["analyze", str(WORKLOADS / "broken_import.py"), "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2
    assert "broken_import.py:2" in err and "Traceback" not in err


def test_workload_fields_are_validated():
    with pytest.raises(WorkloadError, match="exactly one of dataset"):
        Workload(model=lambda: None, loss=lambda m, b: None, batch_size=2)
    with pytest.raises(WorkloadError, match="batch_size must be a positive int"):
        Workload(model=lambda: None, loss=lambda m, b: None, batches=lambda n: [], batch_size=0)
    with pytest.raises(WorkloadError, match="precision"):
        Workload(model=lambda: None, loss=lambda m, b: None, batches=lambda n: [], batch_size=1, precision="fp8")


def test_loss_not_connected_to_parameters(tmp_path):
    import torch
    from torch import nn

    wl = Workload(
        model=lambda: nn.Linear(2, 2),
        batches=lambda n: iter(lambda: torch.randn(n, 2), None),
        loss=lambda model, batch: batch.sum(),
        batch_size=2,
    )
    with pytest.raises(WorkloadError, match="not connected"):
        validate_workload(wl, tmp_path / "x.py")


@pytest.mark.slow
def test_cli_dry_run_errors_come_back_from_the_probe(capsys, tmp_path):
    code = main(["analyze", str(WORKLOADS / "bad_dataset.py"), "--out", str(tmp_path), "--device", "cpu"])
    err = capsys.readouterr().err
    assert code == 2
    assert "bad_dataset.py:13: dataset[3] raised KeyError" in err
    assert not (tmp_path / "results.json").exists() or "baseline" not in (tmp_path / "results.json").read_text()
