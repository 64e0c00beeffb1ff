"""examples/hf_gpt2_tiny.py, the Hugging Face model a new user brings: it honours the workload contract (one real step
through perfscope's validation, as the probe runs it) and is the model the issue names — GPT2LMHeadModel from a config,
4 layers, 256 wide, vocab 8192, fp32, AdamW."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("transformers")

from perfscope.trial.validate import validate_workload  # noqa: E402
from perfscope.workload import load_workload  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "hf_gpt2_tiny.py"


def test_the_hf_gpt2_example_validates_and_is_the_model_it_says():
    workload = load_workload(EXAMPLE)
    assert validate_workload(workload, EXAMPLE) is not None  # the step time the analysis announces its duration from
    model = workload.model()
    assert type(model).__name__ == "GPT2LMHeadModel"
    config = model.config
    assert (config.n_layer, config.n_embd, config.vocab_size) == (4, 256, 8192)
    assert workload.precision == "fp32" and workload.batch_size == 8
    assert type(workload.optimizer(list(model.parameters()))).__name__ == "AdamW"
