"""Real GPU training traces that nobody here wrote: Holistic Trace Analysis' own test data.

Why not committed: the files are HTA's (facebookresearch/HolisticTraceAnalysis, tests/data, MIT licence), and
this workplace keeps other repositories' data out of the project's commits; they live beside the project, in
``../shared/public-traces/hta/`` (the layout of HTA's tests/data), or wherever ``PERFSCOPE_PUBLIC_TRACES`` points.
``python scripts/public_traces.py --from-git HTA_CHECKOUT`` copies them there from a clone of HTA and checks
every file against the digest below, so a test can never run on a different file under the same name.

Tests ask for a trace with ``public_trace(name)``; when the folder is absent the test is skipped with the reason
(on a machine without the folder nothing here can be checked), never passed.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

HTA_REPOSITORY = "facebookresearch/HolisticTraceAnalysis"
HTA_COMMIT = "f4d0062c382f42bd8a74838bcdad1916c7d5d2da"
ROOT_ENV = "PERFSCOPE_PUBLIC_TRACES"


@dataclass(frozen=True)
class PublicTrace:
    path: str
    """Relative to HTA's tests/data."""
    sha256: str
    what: str


TRACES: dict[str, PublicTrace] = {t.path.removesuffix(".json.gz"): t for t in [
    PublicTrace("nccl_parser_config/nccl_data.json.gz",
                "c1cf9c575fdcd7bdc6326ceab834f94b351f81ae55577a7471aa9e328fb8b58e",
                "A100 (PG509-200), rank 0 of a 2-rank NCCL job, 3 profiler steps, 21 NCCL kernels"),
    PublicTrace("negative_queue_length_values_check/rank0.json.gz",
                "b8ce7a1a143b55dd1811d269272b09d1c693ffea85b91858f5fb246e7ad8c5f8",
                "A100-SXM4-80GB, rank 0 of 16 (NCCL), 5 profiler steps, 80 NCCL kernels"),
    PublicTrace("trace_diff/control/control.json.gz",
                "43ed872e4c5dc2e8da5946d761ed61923a75c6c799cc62be9e1c859d440a56fd",
                "A100 (PG509-200), rank 3 of 8 (NCCL), 6 profiler steps"),
    PublicTrace("trace_diff/test/test.json.gz",
                "5e69e04ed19b2dbf59e632008146c1bd6da417dc3af7ab4885c619b11e34f1bf",
                "V100-SXM2-16GB, rank 1 of 2 (NCCL), 6 profiler steps"),
    PublicTrace("ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
                "e279d7280e73719e8dd9550e120cfe081fbe268596bd297fe5fcbf63e2b75a09",
                "V100-SXM2-32GB, one rank, 5 profiler steps, no communication"),
    PublicTrace("trace_filter/sampled_rank-0.json.gz",
                "71b98c30a2751cc56d9bf78f8fb76467acd56e0be6a1f0da23c600941d29aafd",
                "rank 0 of 128 (NCCL), 2 profiler steps, sampled; a two-rank folder with sampled_rank-1"),
    PublicTrace("trace_filter/sampled_rank-1.json.gz",
                "2f9a65fd5f319ec8e60468a22dc9a624eb4b40369c729f6f897259d587eca57e",
                "rank 1 of 128 (NCCL), 2 profiler steps, sampled"),
    PublicTrace("triton_example/triton_example.json.gz",
                "f1702aba1e49885c42a7bf5ab8b63b82a0d630acd41180d87199401dd202ccfb",
                "A100: one inductor (Triton) kernel"),
    PublicTrace("amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
                "39fdab670f9e80a05ccc6d0d07611b3aeba1092fa10681d8dd08cea48d0488b5",
                "AMD MI250 (ROCm 6.2), a toy training loop, 2 profiler steps"),
    PublicTrace("critical_path/cuda_event_sync/event_sync_trace.json.gz",
                "63074c678eb92a77410d7911b64ed39c0e859d0998f74ee9b862de7a12cd7616",
                "A100: cudaEventSynchronize between streams"),
]}
"""By name: the path without ``.json.gz`` (``nccl_parser_config/nccl_data``, ``trace_filter/sampled_rank-0``)."""


def root() -> Path:
    env = os.environ.get(ROOT_ENV)
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / "shared" / "public-traces" / "hta"


def public_folder(name: str) -> Path:
    """A folder of rank traces (``trace_filter``), every file in it verified, or a skip."""
    for key in TRACES:
        if key.startswith(name + "/"):
            public_trace(key)
    return root() / name


def public_trace(name: str) -> Path:
    """The verified path of trace ``name`` (a key of TRACES), or a skip naming the missing folder."""
    trace = TRACES[name]
    path = root() / trace.path
    if not path.is_file():
        pytest.skip(f"real public trace not available here: {path} (see tests/public_traces.py)")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert digest == trace.sha256, f"{path} is not the pinned file from {HTA_REPOSITORY}@{HTA_COMMIT[:10]}"
    return path
