"""The model-parallel rules (PS805–PS807) on synthetic results: what they say and when they stay silent."""

from __future__ import annotations

from perfscope.results import Finding, LayoutRow, LayoutTable, Results
from perfscope.results.messages import msg
from perfscope.rules import run_rules
from perfscope.wording import words
from tests.distributed_factories import make_distributed_results, make_pipeline_results, make_tensor_parallel_results
from tests.factories import load

GiB = 2**30


def _only(results: Results, rule_id: str) -> list[Finding]:
    return [f for f in run_rules(results) if f.rule_id == rule_id]


def test_state_that_zero3_cannot_fit_points_to_tensor_and_pipeline_parallelism():
    (f,) = _only(make_distributed_results(state_bytes=(100 * GiB, 100 * GiB, 200 * GiB)), "PS805")
    assert "ZeRO-3 (FSDP2) on 4 ranks still leaves 100.00 GiB" in f.evidence[0] and "125% of the device's 80.00 GiB" in f.evidence[0]
    assert "parallelize_module" in f.fix and "ColwiseParallel" in f.fix and "fully_shard(block, mesh=mesh[\"dp\"])" in f.fix
    assert "pipeline(model" in f.fix and f.severity == "high"


def test_the_layout_table_is_evidence_when_every_data_parallel_layout_would_not_fit():
    results = make_distributed_results(state_bytes=(GiB, GiB, 2 * GiB))  # ZeRO-3 fits: only the table speaks
    results.layouts = LayoutTable(world_size=4, rows=[
        LayoutRow(layout="dp4", data_parallel=4, status="pruned", prune_reason="would not fit",
                  reason=msg("layout_would_not_fit", state=90 * GiB, limit=80 * GiB, share=0.9),
                  memory_per_rank_bytes=90 * GiB),
        LayoutRow(layout="tp4", tensor_parallel=4, status="measured", memory_per_rank_bytes=30 * GiB),
        LayoutRow(layout="pp4 gpipe m4", pipeline_parallel=4, status="pruned", prune_reason="inapplicable",
                  reason=msg("layout_layers_indivisible", layers=3, pp=4)),
    ])
    (f,) = _only(results, "PS805")
    assert ("every data-parallel layout would not fit (dp4: 90.0 GiB of training state per rank, more than 90% of the "
            "80.0 GiB a rank may hold)") in f.evidence[0]
    assert "tp4 (30.00 GiB per rank)" in f.evidence[0] and "pp4" not in f.evidence[0]


def test_a_run_that_already_splits_the_model_is_not_told_to_split_it():
    results = make_tensor_parallel_results(exposed_share=0.05)
    results.trials[0].metrics.distributed.memory_model[3].parameters = 500 * GiB
    assert _only(results, "PS805") == []


def test_exposed_tensor_parallel_all_reduces_are_named_with_the_link():
    (f,) = _only(make_tensor_parallel_results(exposed_share=0.3), "PS806")
    assert "tp = 2" in f.evidence[0] and "step (30%)" in f.evidence[0] and "gloo on the host" in f.evidence[0]
    assert any(e.startswith("all_reduce: 12 calls per step") for e in f.evidence)
    assert "mesh_dim_names=(\"dp\", \"tp\")" in f.fix and f.addresses == ["communication"] and f.severity == "high"


def test_tensor_parallel_communication_reads_the_sweeps_tp_run_too():
    results = make_distributed_results(exposed_share=0.02)
    tp = make_tensor_parallel_results(exposed_share=0.2).trials[0]
    tp.name = tp.configuration = "tensor_parallel"
    results.trials.append(tp)
    from tests.rules.test_rules import _with_knob

    _with_knob(results, "tensor_parallel", 0.8)
    (f,) = _only(results, "PS806")
    assert f.evidence[0].startswith("tensor_parallel (tp = 2)") and f.severity == "medium"
    assert _only(make_distributed_results(exposed_share=0.3), "PS806") == []  # DDP's exposed time is PS801's


def test_a_pipeline_with_too_few_micro_batches_is_told_how_many_it_needs():
    (f,) = _only(make_pipeline_results(microbatches=2, bubble=0.4), "PS807")
    assert "2 stages, 2 micro-batches (gpipe)" in f.evidence[0] and "40% of the step measured" in f.evidence[0]
    assert "(p − 1) / (m + p − 1) = 33%" in f.evidence[0]
    assert any("8 micro-batches bring the formula to 11%" in e for e in f.evidence)
    assert "n_microbatches=8" in f.fix and "-schedule = ScheduleGPipe(stage, n_microbatches=2" in f.fix


def test_a_loaded_run_quotes_the_replayed_bubble_not_the_wall_clock():
    """A neighbour's load inflates the wall-clock bubble (here 60%); the replay from the stages' own compute is
    what the schedule implies, and what the title quotes then."""
    from perfscope.results.model import Contention

    results = make_pipeline_results(microbatches=2, bubble=0.6)
    for window in results.trials[0].metrics.windows:
        window.contention = Contention(contended=True, reason=load(2.0))
    results.trials[0].metrics.distributed.parallel.bubble_replayed = 0.25
    (f,) = _only(results, "PS807")
    assert f.title.startswith("The pipeline idles 25% of its step") and f.severity == "medium"
    loaded = f"under load ({words(load(2.0))})"
    assert f"60% of the step measured (each rank's step less its own compute), {loaded}" in f.evidence[0]
    assert any(e.endswith("25%: the figure quoted, the wall clock being loaded") for e in f.evidence)
    (quiet,) = _only(make_pipeline_results(microbatches=2, bubble=0.6), "PS807")
    assert quiet.title.startswith("The pipeline idles 60% of its step")  # unloaded: the measurement itself


def test_a_small_bubble_or_enough_micro_batches_is_silent():
    assert _only(make_pipeline_results(microbatches=4, bubble=0.12), "PS807") == []
    assert _only(make_pipeline_results(microbatches=8, bubble=0.3), "PS807") == []  # enough micro-batches: not this fix
