"""The README's Lightning and Hugging Face recipes, run exactly as written (the README is read, not copied here).

The test supplies what a recipe leaves to the reader (`model`, the loaders or datasets) and runs the block in a
fresh folder; the recipe's own arguments (perfscope's defaults included) are left as they are.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest

from perfscope.results import Results

README = Path(__file__).parents[2] / "README.md"


def recipe(marker: str) -> str:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    found = [b for b in blocks if marker in b]
    assert len(found) == 1, f"the README should hold one recipe with {marker}"
    return found[0]


def run_recipe(code: str, namespace: dict[str, object], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Results:
    monkeypatch.chdir(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(compile(code, str(README), "exec"), namespace)  # noqa: S102 - the README's own recipe
    return Results.load(tmp_path / "perfscope-run" / "results.json")


def test_the_lightning_recipe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("lightning.pytorch")
    from tests.integrations.test_lightning import Classifier, loader

    results = run_recipe(recipe("PerfscopeCallback("), {"model": Classifier(), "train_loader": loader(8192),
                                                        "val_loader": loader(256)}, tmp_path, monkeypatch)
    trial = results.trials[0]
    assert trial.status == "ok" and trial.metrics is not None
    assert trial.metrics.steps == 100 - 5 - 1  # perfscope's default warm-up, then the FLOP-counting step
    assert set(trial.metrics.excluded_s) >= {"evaluation", "checkpoint saving"}
    assert (tmp_path / "perfscope-run" / "report.html").is_file()


def test_the_hugging_face_recipe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    from tests.integrations.test_huggingface import Tokens, tiny_gpt2

    results = run_recipe(recipe("PerfscopeTrainerCallback("), {"model": tiny_gpt2(), "train_ds": Tokens(1024),
                                                               "eval_ds": Tokens(32)}, tmp_path, monkeypatch)
    trial = results.trials[0]
    assert trial.status == "ok" and trial.metrics is not None
    assert trial.metrics.steps == 100 - 5 - 1
    assert trial.config.precision == "fp32" and "evaluation" in trial.metrics.excluded_s
    assert (tmp_path / "perfscope-run" / "report.html").is_file()
