"""The integration tests run the real Lightning and transformers (tiny models built from code, nothing downloaded)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import torch

os.environ["HF_HUB_OFFLINE"] = "1"  # a test that tried to download would fail, not hang
os.environ["TRANSFORMERS_OFFLINE"] = "1"


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    """One intra-op thread: on a shared 2-core machine two OpenMP threads stall whenever a neighbour takes a core
    (a tiny GPT-2 step goes from 12 ms to a second). The figures compared are of the same run either way."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
