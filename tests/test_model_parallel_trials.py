"""Tensor- and pipeline-parallel trials on this CPU (gloo, torchrun): what they measure, on fresh interpreters.

The pipeline's bubble is checked on a balanced, compute-dominated stack (tests/workloads/pp_balanced.py: 8 identical
MLP blocks, 4 per stage, 32 KiB sent per micro-batch) against (p − 1) / (m + p − 1). On a loaded 2-core machine the
wall-clock bubble is dominated by the waits (a rank woken from a receive waits its turn for a core; a sending rank
shares its core with gloo's send thread): measured here at 35–58 % for a formula of 20 %. The bubble replayed from
each stage's fastest forward and backward call (perfscope.measure.bubble) is close to the formula on a quiet machine,
but per-call CPU time still moves with load (a clean-clone CI run: 25.3 % for 1F1B's 20 %), so "within 5 points" is
benchmarks/pipeline_bubble.py's figure, not a test. The test holds what load cannot move: the formula for the
schedule used, the wall-clock bubble never below the formula by more than 5 points (a pipeline cannot idle less than
its schedule), every rank's compute per micro-batch (its fastest calls' CPU time) equal within 25 %, the stages,
samples and parameter bytes.
"""

from pathlib import Path

import pytest

from perfscope.measure.mfu import choose_peak
from perfscope.results import Environment, Results, WorkloadInfo
from perfscope.results.config import TrialConfig
from perfscope.results.messages import msg
from perfscope.trial.launch import Launch
from perfscope.trial.session import Progress, Session

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "ddp_tiny_transformer.py"
BALANCED = ROOT / "tests" / "workloads" / "pp_balanced.py"
pytestmark = pytest.mark.slow

BASE = TrialConfig(micro_batch_size=8, steps=6, warmup_steps=1, nproc_per_node=2, count_flops=False, sample_utilization=False)


def _session(tmp_path: Path, workload: Path, nproc: int = 2) -> Session:
    results = Results(environment=Environment(device_type="cpu", device_name="test cpu", measured_ceiling_tflops={"fp32": 0.1}),
                      workload=WorkloadInfo(path=str(workload), sha256="x", name=workload.stem))
    results.peak = choose_peak(results.environment)
    return Session(results, out_dir=tmp_path, workload_path=workload, timeout_s=300, progress=Progress(), contention_retries=0,
                   launch=Launch(nproc_per_node=nproc, collective_timeout_s=60))


def test_a_tensor_parallel_trial_splits_the_blocks_and_counts_each_sample_once(tmp_path):
    config = BASE.replace(tensor_parallel=2, micro_batch_size=16, capture_trace=True, count_flops=True)
    trial = _session(tmp_path, EXAMPLE).measure("tp", config)
    assert trial.status == "ok", trial.error
    facts = trial.metrics.distributed
    assert facts.parallel.tensor_parallel == 2 and facts.parallel.data_parallel == 1 and facts.global_batch == 16
    assert facts.parallel.tp_plan["blocks.0.q"] == "colwise" and facts.parallel.tp_plan["blocks.1.mlp.2"] == "rowwise"
    for rank in facts.ranks:  # both ranks of the TP group computed the same 16 samples per step
        assert rank.samples == 6 * 16
    assert facts.job_samples_per_s == pytest.approx(6 * 16 / max(r.wall_s for r in facts.ranks))
    # each rank holds half of every split Linear's weight (and of the colwise biases: 395,008 of the 536,064
    # parameters) and all of the rest (embeddings, norms, head, the rowwise biases added after the all-reduce)
    assert [r.parameter_bytes for r in facts.ranks] == [(536_064 - 395_008 // 2) * 4] * 2
    assert facts.communication is not None and facts.communication.collective_s > 0  # the TP all-reduces, from the trace
    assert msg("flops_tp_share", tp=2) in trial.metrics.flop_notes


@pytest.mark.parametrize(("schedule", "formula", "stages"), [("gpipe", 0.2, [[0], [1]]), ("1f1b", 0.2, [[0], [1]]),
                                                        ("interleaved_1f1b", 1 / 9, [[0, 2], [1, 3]])])
def test_a_balanced_pipelines_bubble_is_the_formulas(tmp_path, schedule, formula, stages):
    config = BASE.replace(pipeline_parallel=2, pipeline_schedule=schedule, micro_batch_size=32, grad_accum_steps=4,
                          steps=10, warmup_steps=2)
    trial = _session(tmp_path, BALANCED).measure("pp", config)
    assert trial.status == "ok", trial.error
    facts = trial.metrics.distributed
    pp = facts.parallel
    assert pp.pipeline_parallel == 2 and pp.microbatches == 4 and pp.schedule == schedule and facts.global_batch == 128
    assert pp.bubble_formula == pytest.approx(formula)  # (p − 1) / (v·m + p − 1), v = 2 stages per rank interleaved
    assert 0 <= pp.bubble_replayed < 1, pp  # within 5 points of the formula: benchmarks/pipeline_bubble.py
    assert pp.bubble_measured >= pp.bubble_formula - 0.05, pp
    assert pp.stage_imbalance < 0.25, pp
    assert [t.stages for t in pp.stages] == stages and all(t.forward_call_s > 0 and t.compute_clock == "thread CPU" for t in pp.stages)
    assert [r.samples for r in facts.ranks] == [10 * 128] * 2
    assert facts.job_samples_per_s == pytest.approx(10 * 128 / max(r.wall_s for r in facts.ranks))
    assert len({round(v, 4) for v in trial.metrics.losses}) > 1  # the last stage's loss reached rank 0, every step
    assert [r.parameter_bytes for r in facts.ranks] == [4 * (256 * 1024 * 2 + 1024 + 256) * 4] * 2  # 4 blocks per rank


def test_two_dimensional_fsdp2_over_tensor_parallel_on_four_ranks(tmp_path):
    """dp 2 × tp 2 (about 80 s on a 2-core machine): FSDP2 shards the TP shards again across the two replicas."""
    config = BASE.replace(nproc_per_node=4, tensor_parallel=2, data_parallel="fsdp", micro_batch_size=16)
    trial = _session(tmp_path, EXAMPLE, nproc=4).measure("dp2-tp2", config)
    assert trial.status == "ok", trial.error
    facts = trial.metrics.distributed
    assert (facts.parallel.data_parallel, facts.parallel.tensor_parallel) == (2, 2) and facts.global_batch == 32
    assert [r.parameter_bytes for r in facts.ranks] == [(536_064 - 395_008 // 2) * 4 // 2] * 4  # TP's half, halved by FSDP2
    assert facts.job_samples_per_s == pytest.approx(4 * 6 * 16 / 2 / max(r.wall_s for r in facts.ranks))  # 2 replicas' samples
