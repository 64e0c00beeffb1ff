"""Real GPU training traces that nobody here wrote: Holistic Trace Analysis' own test data.

Why not committed: the files are HTA's (and a few of param's and kineto's, each with its repository and commit) (facebookresearch/HolisticTraceAnalysis, tests/data, MIT licence), and
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
    """Relative to HTA's tests/data (the folder the tests look in); other repositories' files beside it (``../param/``)."""
    sha256: str
    what: str
    repository: str = HTA_REPOSITORY
    commit: str = HTA_COMMIT
    source: str = ""
    """Its path in ``repository`` at ``commit`` (default: tests/data/ + path)."""

    @property
    def source_path(self) -> str:
        return self.source or f"tests/data/{self.path}"


TRACES: dict[str, PublicTrace] = {t.path.removesuffix(".json.gz").removesuffix(".gz"): t for t in [
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
    # The rest of HTA's tests/data (issue 34): how users' files really look, training or not.
    PublicTrace("cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz",
                "b2ff87b29bd604b0c30bca65915af4388b53a7f421f0897c68a7862e1559b6e5", "CPU-only rank, one profiler step"),
    PublicTrace("critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz",
                "b9febb1abc8cc729a2890fb6a4171de9867ba72c944437ee046067e7c89912dc", "A100, param AlexNet benchmark, no steps"),
    PublicTrace("critical_path/cuda_event_sync_multi_stream/event_sync_trace.json.gz",
                "3e79d573357fd8f764206cc2e514e4a1be4ef43808269689056ed400972ff09c", "A100, event sync across streams, no steps"),
    PublicTrace("critical_path/end_to_end/simple_add/input/trace.json.gz",
                "8866b9c04126fc8fff1256b6e39851166739913c2cebb0016d8a4f863872fc3f", "A100, param torch.add benchmark"),
    PublicTrace("critical_path/end_to_end/simple_add/output/overlaid_critical_path_trace.json.gz",
                "36e89621c59a8834394764aabdb0ca952c70d95799e1b82a3ee273778841b2e7", "the same, HTA's critical path overlaid"),
    PublicTrace("critical_path/simple_add/benchmark_result_493459_1694039959_trace.json.gz",
                "8866b9c04126fc8fff1256b6e39851166739913c2cebb0016d8a4f863872fc3f", "A100, param torch.add benchmark"),
    PublicTrace("cupti_profiler/benchmark_result_924719_1679055439_trace.json.gz",
                "07e7e02da9cfda66f5b6fc5fd17e1f93185321504496f4c00e8d375fb162bf84", "A100, CUPTI counters, no kernels"),
    PublicTrace("df_index_resolver/df_index_resolver.json.gz",
                "769af9ab5262468eb7baf6a7bfdb138ef15542264c72c0c313758d951b16dc15", "V100-SXM2-32GB, 5 profiler steps"),
    PublicTrace("distributed_info_unavailable/distributed_info_not_found.json.gz",
                "2294b134930afc9253c9cc80c31ff7b40709f4114b51a37301dc7a19046bf7d2", "A100 listed, no GPU kernel (CPU ops only)"),
    PublicTrace("execution_trace/benchmark_simple_add_et.json.gz",
                "7ce1b653978fea1f893ae00c6fa916e0aad069cf9aa456a7b42db43bcbfad7d5", "an execution trace (Chakra ET), not Kineto"),
    PublicTrace("execution_trace/benchmark_simple_add_trace.json.gz",
                "7f7e72221e263d763ac840686991321d238801cbea75d9febb59d3e3859d2b02", "A100, the Kineto trace beside it"),
    PublicTrace("memory_analysis/memory_timeline.raw.gz",
                "9298e87c3ee81bc00dd5f6df0fa3877e79c2e5ac86de3b09b8c6aaa2a756feb2", "a memory-timeline dump, not a trace"),
    PublicTrace("mixed_files/rank_non_gpu.json.gz",
                "7abc3802f28155bf163a2b71d08ee57d3f759d2ffc6a190480e6556f328e4476", "a rank with no GPU, CPU ops only"),
    PublicTrace("mtia_inference_trace/mtia_inference_rank_0.json.gz",
                "ed1b118e53f23f3a3a055dec52f6cc45eaf32c6354e8693335cfca608cff84f5", "MTIA inference, no steps"),
    PublicTrace("mtia_trace_single_rank/mtia_rank_0.json.gz",
                "74786104b3c45f02b805a5c346a8202c3ecc318a566a65e0b47c56d706374f80", "MTIA, one profiler step"),
    PublicTrace("rank_non_gpu/rank_non_gpu.json.gz",
                "7abc3802f28155bf163a2b71d08ee57d3f759d2ffc6a190480e6556f328e4476", "a rank with no GPU, CPU ops only"),
    PublicTrace("rank_unavailable/rank_not_found.json.gz",
                "5d7c951ffc8455aceef0deaa2378cc5718d247173abcaec9f45af6d0826864b5", "no distributedInfo rank"),
    PublicTrace("timeline_analysis/sampled_rank-0.json.gz",
                "71b98c30a2751cc56d9bf78f8fb76467acd56e0be6a1f0da23c600941d29aafd", "the same file as trace_filter/sampled_rank-0"),
    PublicTrace("trace_compare/base/base.json.gz",
                "92291fc17b2307b3084e59d7d04b589e2e8cbe06cb0639f70c4a145a7cfce8b7", "a hand-made 2-step trace (HTA's compare test)"),
    PublicTrace("trace_compare/test/test.json.gz",
                "da79a9c430a45e587b728055a7bb97ed3acf54f960eb5fdfe0bf2c6da254f782", "a hand-made 2-step trace (HTA's compare test)"),
    PublicTrace("trace_file_list/inference_rank_1.json.gz",
                "4c37e0ca5cae61bd6f9d46cc6db0e7e09260df07990d1bf6bbb253f0f636d5e8",
                "inference, old category spellings (Kernel, Runtime), no steps"),
    # Not in ../shared/public-traces (yet): pytorch/kineto's TensorBoard-plugin samples (BSD licence), torch 1.9 on a
    # V100, old category spellings; skipped with the reason where absent (scripts/public_traces.py --from-git KINETO).
    PublicTrace("../kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",
                "a91798b500ce9d6e21c416ce32dcd8ecf4788489df86f59ba2f944906c90b853",
                "pytorch/kineto@be239c0 tb_plugin/samples: ResNet-50 on a Tesla V100-DGXS (sm 7.0), num_workers=0: the "
                "loader takes ~60 ms of a 175 ms step", "pytorch/kineto", "be239c044d2f4b62982e1ff64144097acd69f59a",
                "tb_plugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"),
    PublicTrace("../kineto/resnet50_num_workers_4/worker0.1623212756351.pt.trace.json.gz",
                "c290eb249e74824736f81886587614fc5d96660d3e60d0c256dee4b4a0e268f6",
                "pytorch/kineto@c6e5fe2 tb_plugin/samples: the same ResNet-50 with num_workers=4", "pytorch/kineto",
                "c6e5fe205a8be11181aac547f88424cb3a28c8f8",
                "tb_plugin/samples/resnet50_num_workers_4/worker0.1623212756351.pt.trace.json.gz"),
    PublicTrace("../param/linear_kineto.json.gz",
                "c2c4a2661c767ca22e89f18c945b7ba9aeb9d050b2e48f9adfbb2c45a59a9d42",
                "facebookresearch/param et_replay/tests/inputs@1e115ff: a linear model, 40 SGD steps on an RTX 2080 Ti, no "
                "ProfilerStep spans (profiled without a schedule)", "facebookresearch/param", "1e115ff",
                "et_replay/tests/inputs/linear_kineto.json.gz"),
]}
"""By name: the path without ``.json.gz`` (``nccl_parser_config/nccl_data``, ``trace_filter/sampled_rank-0``); param's
trace is ``../param/linear_kineto`` (beside HTA's folder)."""
NOT_TRACES = {
    "execution_trace/benchmark_simple_add_et": "JSON of another shape",
    "memory_analysis/memory_timeline.raw": "no complete",
}
"""The files that are not Kineto traces, and the words of their one-line refusal."""


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
    assert digest == trace.sha256, f"{path} is not the pinned file from {trace.repository}@{trace.commit[:10]}"
    return path


def union(intervals: list[tuple[float, float]]) -> list[list[float]]:
    """The union of (start, end) intervals, merged and sorted: the independent counts' one interval helper (none of
    perfscope's trace code)."""
    merged: list[list[float]] = []
    for s, t in sorted(intervals):
        if merged and s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], t)
        else:
            merged.append([s, t])
    return merged


def inside(merged: list[list[float]], spans: list[tuple[float, float]]) -> float:
    """The time of ``merged`` that falls inside ``spans``."""
    return sum(max(0.0, min(t, b) - max(s, a)) for s, t in merged for a, b in spans)
