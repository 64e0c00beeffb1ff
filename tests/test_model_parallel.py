"""Tensor / pipeline parallelism without a process group: the TP plan, the pipeline's helpers, the bubble, the
config's rules, the knobs and the layout search's pruning. The torchrun trials are tests/test_model_parallel_trials.py."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from perfscope.knobs import KnobContext, knob
from perfscope.measure.bubble import (
    StepRecord,
    imbalance,
    replay_bubble,
    schedule_order,
    stage_timing,
)
from perfscope.results import Environment, ModelFacts, ModelLayout, Results
from perfscope.results.config import TrialConfig
from perfscope.results.layout import bubble_formula
from perfscope.results.messages import msg
from perfscope.search.layout import layout_candidates, state_per_rank
from perfscope.trial.pipeline_parallel import concat, model_inputs, rows, split_points
from perfscope.trial.tensor_parallel import derive_plan
from perfscope.wording import words
from perfscope.workload import Workload

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))
import ddp_tiny_transformer  # noqa: E402
import tiny_transformer  # noqa: E402

GiB = 2**30


# ------------------------------------------------------------------------------------------ the TP plan


def test_the_plan_splits_attention_and_mlp_projections_megatron_style():
    plan = derive_plan(ddp_tiny_transformer.TinyGPT(), 2)
    assert plan.reason is None and "2 × Block" in plan.source
    assert {k: v for k, v in plan.styles.items() if k.startswith("blocks.1.")} == {
        "blocks.1.q": "colwise", "blocks.1.k": "colwise", "blocks.1.v": "colwise", "blocks.1.proj": "rowwise",
        "blocks.1.mlp.0": "colwise", "blocks.1.mlp.2": "rowwise"}
    assert not any(k.startswith(("tok", "pos", "head", "ln_f")) for k in plan.styles)  # replicated


def test_a_packed_qkv_projection_or_indivisible_heads_have_no_correct_plan():
    packed = derive_plan(tiny_transformer.TinyGPT(), 2)
    assert packed.styles == {} and packed.reason == msg("tp_packed_qkv", name="qkv", fan_in=128, fan_out=384)
    assert derive_plan(ddp_tiny_transformer.TinyGPT(), 8).reason == msg("tp_heads_indivisible", attr="n_heads", heads=4, tp=8)
    assert derive_plan(nn.Linear(4, 4), 2).reason == msg("tp_no_repeated_blocks")


def test_the_workload_can_give_its_own_plan():
    w = Workload(model=nn.Linear, loss=lambda m, b: None, batches=lambda n: [], batch_size=1,
                 tensor_parallel_plan=lambda model: {"blocks.0.qkv": "colwise_dtensor", "blocks.0.proj": "rowwise"})
    plan = derive_plan(tiny_transformer.TinyGPT(), 2, w)
    assert plan.reason is None and plan.source == "the workload's tensor_parallel_plan" and len(plan.styles) == 2
    bad = dataclasses.replace(w, tensor_parallel_plan=lambda model: {"blocks.0.qkv": "diagonal"})
    assert derive_plan(tiny_transformer.TinyGPT(), 2, bad).reason == msg(
        "tp_unknown_styles", bad={"blocks.0.qkv": "diagonal"}, styles=["colwise", "rowwise", "sequence", "colwise_dtensor"])


# ------------------------------------------------------------------------------------------ pipeline helpers


def test_the_model_inputs_are_learned_from_the_users_loss_and_batches_are_cut_by_rows():
    x, y = torch.arange(12).view(6, 2), torch.arange(6)
    args, kwargs = model_inputs(tiny_transformer.loss, (x, y))
    assert args[0] is x and kwargs == {}
    with pytest.raises(ValueError, match="never called the model"):
        model_inputs(lambda model, batch: batch[0].sum(), (x, y))
    picked = rows({"x": x, "y": [y]}, torch.tensor([4, 1]))
    assert picked["x"].tolist() == [[8, 9], [2, 3]] and picked["y"][0].tolist() == [4, 1]
    joined = concat([(x[:2], y[:2]), (x[2:], y[2:])])
    assert torch.equal(joined[0], x) and torch.equal(joined[1], y)


def test_stages_split_the_repeated_blocks_evenly():
    class Deep(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = nn.ModuleList(nn.Linear(4, 4) for _ in range(8))

    assert split_points(Deep(), 2) == ["layers.4"]
    assert split_points(Deep(), 4) == ["layers.2", "layers.4", "layers.6"]
    with pytest.raises(ValueError, match="8 repeated blocks cannot fill 16"):
        split_points(Deep(), 16)


# ------------------------------------------------------------------------------------------ the bubble


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize(("p", "m"), [(2, 4), (4, 8), (2, 1), (3, 2)])
def test_the_replay_of_equal_stages_is_the_formula(schedule, p, m):
    order = schedule_order(schedule, p, m)
    replayed = replay_bubble(order, {s: 1.0 for s in range(p)}, {s: 2.0 for s in range(p)})
    assert replayed == pytest.approx(bubble_formula(p, m)) == pytest.approx((p - 1) / (m + p - 1))


def test_1f1b_runs_p_minus_s_forwards_first_and_a_slow_stage_grows_the_bubble():
    order = schedule_order("1f1b", 2, 4)
    assert [f"{a.computation_type}{a.microbatch_index}" for a in order[0]] == ["F0", "F1", "B0", "F2", "B1", "F3", "B2", "B3"]
    assert [f"{a.computation_type}{a.microbatch_index}" for a in order[1]] == ["F0", "B0", "F1", "B1", "F2", "B2", "F3", "B3"]
    slow = replay_bubble(schedule_order("gpipe", 2, 4), {0: 1.0, 1: 2.0}, {0: 2.0, 1: 4.0})
    assert slow > bubble_formula(2, 4) + 0.05
    assert bubble_formula(2, 4, virtual=2) == pytest.approx(1 / 9)


def test_the_bubble_formula_has_one_definition():
    """results/layout.py holds it (the rule, the layout search and the trial read it there); measure.bubble, where it
    once lived, neither defines nor re-exports it."""
    from perfscope.measure import bubble

    assert not hasattr(bubble, "bubble_formula")
    with pytest.raises(ValueError):
        bubble_formula(2, 0)


def test_stage_timing_takes_medians_per_step_and_a_load_immune_call():
    steps = [StepRecord(forward_s=0.4, backward_s=0.8, step_s=1.5, forward_calls_s=[0.1, 0.3], backward_calls_s=[0.4, 0.4]),
             StepRecord(forward_s=0.2, backward_s=0.4, step_s=1.0, forward_calls_s=[0.1, 0.1], backward_calls_s=[0.2, 0.2]),
             StepRecord(forward_s=0.2, backward_s=0.4, step_s=0.8, forward_calls_s=[0.08, 0.12], backward_calls_s=[0.2, 0.2])]
    t = stage_timing(1, [1], steps)
    assert (t.forward_s, t.backward_s, t.step_s) == (0.2, 0.4, 1.0)
    assert t.idle_share == pytest.approx(0.25)
    assert (t.compute_clock, t.forward_call_s, t.backward_call_s) == ("wall", 0.08, 0.2)  # CUDA: the fastest call
    cpu = stage_timing(1, [1], [dataclasses.replace(s, compute_clock="thread CPU") for s in steps])
    assert (cpu.forward_call_s, cpu.backward_call_s) == (0.08, 0.2)  # CPU time too: load only adds to a call
    assert imbalance([0.3, 0.3]) == 0 and imbalance([0.2, 0.6]) == pytest.approx(0.6 / 0.4 - 1)


def test_stage_imbalance_is_the_ranks_compute_not_the_wall_time_load_added():
    """Two equal stages: rank 0's calls took 3× longer on the wall clock (its core also ran gloo's send thread and a
    neighbour), its fastest calls' CPU time is rank 1's. The pipeline is balanced, and the facts say so; a rank
    that computes more per call (the last stage's loss) is what the imbalance counts."""
    from perfscope.results.layout import StageTiming
    from perfscope.trial.model_parallel import parallel_facts

    config = TrialConfig(micro_batch_size=8, grad_accum_steps=4, nproc_per_node=2, pipeline_parallel=2)
    timings = [StageTiming(rank=0, stages=[0], forward_s=0.12, backward_s=0.24, step_s=0.5, forward_call_s=0.01,
                           backward_call_s=0.02, compute_clock="thread CPU"),
               StageTiming(rank=1, stages=[1], forward_s=0.04, backward_s=0.08, step_s=0.5, forward_call_s=0.01,
                           backward_call_s=0.02, compute_clock="thread CPU")]
    gathered = [(t, {"forward": {t.rank: 0.01}, "backward": {t.rank: 0.02}, "order": None}) for t in timings]
    facts = parallel_facts(config, None, gathered)
    assert facts.stage_imbalance == 0 and facts.bubble_replayed == pytest.approx(0.2)  # 3× the wall time: still balanced
    gathered[1][1]["forward"][1] = 0.01 + 0.03 / 4  # the loss on the last stage, a quarter per micro-batch
    assert parallel_facts(config, None, gathered).stage_imbalance == pytest.approx(0.0375 / 0.03375 - 1)


# ------------------------------------------------------------------------------------------ config


def test_the_config_knows_which_layouts_it_can_run():
    tp = TrialConfig(micro_batch_size=16, nproc_per_node=2, tensor_parallel=2)
    assert tp.model_parallel == 2 and tp.data_parallel_size == 1 and tp.global_batch == 16
    two_d = TrialConfig(micro_batch_size=8, nproc_per_node=4, tensor_parallel=2, data_parallel="fsdp")
    assert two_d.data_parallel_size == 2 and two_d.global_batch == 16
    pp = TrialConfig(micro_batch_size=4, grad_accum_steps=4, nproc_per_node=2, pipeline_parallel=2)
    assert pp.global_batch == 16
    for bad, match in [({"tensor_parallel": 2, "data_parallel": "ddp"}, "composes with FSDP2 only"),
                       ({"tensor_parallel": 2, "pipeline_parallel": 2, "nproc_per_node": 4}, "3-D"),
                       ({"tensor_parallel": 3}, "not a multiple"),
                       ({"pipeline_parallel": 2, "data_parallel": "fsdp"}, "one stage per rank"),
                       ({"tensor_parallel": 2, "data_parallel": "fsdp"}, "exactly when world size > tp"),
                       ({"pipeline_parallel": 2, "pipeline_schedule": "interleaved_1f1b", "grad_accum_steps": 3},
                        "divisible by the stages")]:
        with pytest.raises(ValueError, match=match):
            TrialConfig(micro_batch_size=8, **{"nproc_per_node": 2, **bad})


# ------------------------------------------------------------------------------------------ knobs


LAYOUT = ModelLayout(blocks=4, block_parameter_count=800, tp_parameter_count=700, tp_inapplicable={"8": msg("tp_heads_indivisible", attr="n_heads", heads=4, tp=8)})


def _ctx(layout: ModelLayout | None = LAYOUT, **base: object) -> KnobContext:
    return KnobContext(
        workload=Workload(model=lambda: None, loss=lambda m, b: None, batches=lambda n: [], batch_size=8),
        base=TrialConfig(micro_batch_size=8, **{"nproc_per_node": 2, "data_parallel": "ddp", **base}),  # type: ignore[arg-type]
        environment=Environment(device_type="cpu", device_name="cpu", cpu_cores_logical=2),
        model=ModelFacts(parameter_count=1000, has_conv2d=False, repeated_blocks=4, optimizer_class="AdamW", layout=layout),
    )


def test_the_layout_knobs_keep_the_global_batch_and_build_valid_configs():
    c = _ctx()
    tp, pp = knob("tensor_parallel"), knob("pipeline_parallel")
    assert tp.applies(c) is None and pp.applies(c) is None
    (v,) = tp.variants(c)
    config = tp.apply(c.base, v)
    assert config.tensor_parallel == 2 and config.global_batch == c.base.global_batch == 16
    configs = [pp.apply(c.base, v) for v in pp.variants(c)]
    assert [(x.pipeline_schedule, x.grad_accum_steps, x.micro_batch_size) for x in configs] == [
        ("gpipe", 4, 4), ("1f1b", 4, 4), ("interleaved_1f1b", 4, 4)]  # 4 blocks: two stages of 1 per rank
    assert all(x.global_batch == 16 for x in configs)
    assert "parallelize_module" in tp.code_change(c) and "ScheduleGPipe" in pp.code_change(c)
    four = _ctx(nproc_per_node=4)
    assert [tp.apply(four.base, v).data_parallel for v in tp.variants(four)] == ["none", "fsdp"]  # TP alone, then 2-D


def test_the_layout_knobs_say_why_they_do_not_apply():
    packed = msg("tp_packed_qkv", name="qkv", fan_in=128, fan_out=384)
    assert "packed" in knob("tensor_parallel").applies(_ctx(dataclasses.replace(LAYOUT, tp_inapplicable={"2": packed})))
    assert "spans nodes" in knob("tensor_parallel").applies(_ctx(nproc_per_node=1, nnodes=2))
    assert "3 layers are not divisible by pp = 2" in knob("pipeline_parallel").applies(_ctx(dataclasses.replace(LAYOUT, blocks=3)))
    assert "world size 1" in knob("tensor_parallel").applies(_ctx(nproc_per_node=1, data_parallel="none"))


# ------------------------------------------------------------------------------------------ the layout search


def _rows(world: int = 2, memory_limit: int | None = None, layout: ModelLayout = LAYOUT, **base: object) -> dict[str, object]:
    model = ModelFacts(parameter_count=1000, has_conv2d=False, repeated_blocks=layout.blocks, optimizer_class="AdamW", layout=layout)
    config = TrialConfig(micro_batch_size=8, **{"nproc_per_node": world, "data_parallel": "ddp", **base})  # type: ignore[arg-type]
    return {c.row.layout: c for c in layout_candidates(config, model, bytes_per_parameter=16.0, memory_limit=memory_limit)}


def test_the_search_measures_what_fits_and_says_why_it_prunes_the_rest():
    rows = _rows()
    measured = {k for k, c in rows.items() if c.config is not None}
    assert measured == {"dp2", "tp2", "pp2 gpipe m4", "pp2 1f1b m4", "pp2 gpipe m8", "pp2 1f1b m8",
                        "pp2 interleaved_1f1b m2", "pp2 interleaved_1f1b m4", "pp2 interleaved_1f1b m8"}  # 4 blocks: 2 per rank
    assert rows["pp2 interleaved_1f1b m2"].row.bubble_formula == pytest.approx(1 / 5)  # (p − 1) / (v·m + p − 1)
    assert rows["pp2 gpipe m2"].row.prune_reason == "bubble"
    assert rows["pp2 gpipe m2"].row.reason == msg("layout_bubble", bubble=pytest.approx(1 / 3), microbatches=2, limit=0.25)
    assert rows["dp2 + ckpt"].row.prune_reason == "not needed"
    assert rows["tp2"].config.micro_batch_size == 16 and rows["pp2 1f1b m8"].config.micro_batch_size == 2
    assert all(c.config.global_batch == 16 for c in rows.values() if c.config is not None)


def test_memory_heads_layers_and_the_interconnect_prune():
    # 1000 parameters × 16 B = 16000 B per DDP rank; TP splits 700 of them, PP 800.
    assert state_per_rank(ModelFacts(parameter_count=1000, has_conv2d=False, repeated_blocks=4, optimizer_class="AdamW",
                                     layout=LAYOUT), 16.0, dp=1, tp=2, pp=1, sharded=False) == (350 + 300) * 16
    rows = _rows(memory_limit=12000)
    assert rows["dp2"].row.prune_reason == "would not fit" and rows["tp2"].config is not None  # 10400 B < 90% of 12000
    assert rows["pp2 gpipe m4"].config is not None  # (400 + 200) × 16 = 9600 B
    features = msg("tp_features_indivisible", name="mlp.0", width=6, tp=2)
    odd = _rows(layout=dataclasses.replace(LAYOUT, blocks=3, tp_inapplicable={"2": features}))
    assert odd["tp2"].row.prune_reason == "inapplicable"
    assert odd["tp2"].row.reason == msg("layout_tp_inapplicable", why=features)
    assert odd["pp2 gpipe m4"].row.reason == msg("layout_layers_indivisible", layers=3, pp=2)
    nodes = _rows(world=4, nproc_per_node=2, nnodes=2)
    assert nodes["tp4"].row.prune_reason == "communication bound"
    assert nodes["tp2 × pp2 gpipe m4"].row.reason == msg("layout_3d")
    assert nodes["dp2 × tp2"].config.data_parallel == "fsdp"  # 2-D: FSDP2 across the replicas


class _Session:
    """Measures a layout by returning a made-up run: throughput per layout from ``rates``."""

    def __init__(self, results, rates: dict[str, float]) -> None:
        self.results, self.rates, self.measured = results, rates, []

    def measure(self, name, config, knobs):
        from tests.distributed_factories import make_distributed_facts
        from tests.factories import make_trial

        trial = make_trial(name)
        trial.config = config
        trial.metrics.samples_per_s = self.rates[name]
        trial.metrics.distributed = make_distributed_facts(world=2)
        self.measured.append(name)
        self.results.trials.append(trial)
        return trial

    def save(self):
        pass


def _two_rank_ddp_results() -> tuple[Results, TrialConfig]:
    """A 2-rank DDP baseline on CPU whose model reports LAYOUT (what the layout search reads), and its config."""
    from tests.distributed_factories import make_distributed_results

    results = make_distributed_results(device="cpu", world=2)
    results.environment.host_memory_bytes = 64 * GiB
    base = results.trials[0].config.replace(micro_batch_size=8, data_parallel="ddp", precision="fp32", tf32=None)
    results.trials[0].config = base
    results.workload.model = ModelFacts(parameter_count=1000, has_conv2d=False, repeated_blocks=4, optimizer_class="AdamW",
                                        layout=LAYOUT)
    return results, base


def test_the_search_reuses_runs_measures_the_rest_and_ranks_per_rank():
    from perfscope.search.layout import run_layout_search

    results, base = _two_rank_ddp_results()
    rates = {"layout-tp2": 50.0, "layout-pp2-gpipe-m4": 90.0, "layout-pp2-1f1b-m4": 95.0, "layout-pp2-gpipe-m8": 80.0,
             "layout-pp2-1f1b-m8": 85.0, "layout-pp2-interleaved_1f1b-m2": 60.0, "layout-pp2-interleaved_1f1b-m4": 70.0,
             "layout-pp2-interleaved_1f1b-m8": 75.0}
    session = _Session(results, rates)
    workload = Workload(model=lambda: None, loss=lambda m, b: None, batches=lambda n: [], batch_size=8)
    table = run_layout_search(session, workload, base)
    assert sorted(session.measured) == sorted(rates)  # dp2 is the baseline's own run: reused, not measured again
    ranked = table.measured()
    assert [r.layout for r in ranked][:2] == ["pp2 1f1b m4", "pp2 gpipe m4"]
    assert ranked[0].samples_per_s_per_rank == 95.0 / 2 and ranked[0].configuration == "layout-pp2-1f1b-m4"
    dp2 = next(r for r in table.rows if r.layout == "dp2")
    assert dp2.configuration == "baseline" and dp2.collective_s_per_step is not None
    assert results.layouts is table and table.memory_limit_bytes == 32 * GiB  # the host's memory / 2 ranks per node
    from perfscope.report.layout import layout_view
    from perfscope.report.markdown import layout_markdown

    text = "\n".join(layout_markdown(layout_view(results)))
    idle = next(r for r in table.rows if r.prune_reason == "bubble" and r.reason.params["bubble"] < 0.34)
    assert idle.reason is not None and idle.reason.code == "layout_bubble" and round(idle.reason.params["bubble"], 2) == 0.33
    assert "## Layouts" in text and "pp2 1f1b m4 **best**" in text and f"bubble: {words(idle.reason)}" in text  # its words
    from perfscope.report.html import render_html

    html = render_html(results)
    assert 'id="layouts"' in html and 'href="#layouts"' in html and "pp2 1f1b m4" in html and "would not fit" not in html


def test_the_new_fields_round_trip_and_older_files_read_without_them():
    from perfscope.results import LayoutRow, LayoutTable, ParallelFacts, Results, StageTiming
    from tests.distributed_factories import make_pipeline_results

    results = make_pipeline_results(microbatches=4, bubble=0.3)
    results.trials[0].metrics.distributed.parallel.stages = [StageTiming(rank=0, stages=[0], forward_s=0.1, step_s=0.5,
                                                                         idle_share=0.8, compute_clock="thread CPU")]
    results.layouts = LayoutTable(world_size=2, rows=[LayoutRow(layout="pp2 gpipe m4", pipeline_parallel=2, status="measured",
                                                                bubble=0.3, bubble_formula=0.2)])
    back = Results.from_dict(results.to_dict())
    assert back.layouts == results.layouts
    assert back.trials[0].metrics.distributed.parallel == results.trials[0].metrics.distributed.parallel
    assert back.trials[0].config.pipeline_parallel == 2 and back.trials[0].config.grad_accum_steps == 4
    old = results.to_dict()
    del old["layouts"]
    del old["trials"][0]["metrics"]["distributed"]["parallel"]
    for key in ("tensor_parallel", "pipeline_parallel", "pipeline_schedule"):
        del old["trials"][0]["config"][key]
    old["trials"][0]["config"]["grad_accum_steps"] = 1
    before = Results.from_dict(old)  # a file written before model parallelism existed
    assert before.layouts is None and before.trials[0].metrics.distributed.parallel is None
    assert before.trials[0].config.tensor_parallel == 1 and before.trials[0].config.model_parallel == 1
    assert isinstance(ParallelFacts(), ParallelFacts)
    bad = results.to_dict()
    bad["layouts"]["rows"][0]["bubble"] = 1.5
    with pytest.raises(Exception, match="bubble"):
        Results.from_dict(bad)


def test_the_search_runs_when_every_baseline_run_was_contended():
    from perfscope.search.layout import run_layout_search
    from tests.distributed_factories import make_distributed_results
    from tests.factories import contended

    results = make_distributed_results(device="cpu", world=2)
    results.trials[0].excluded = contended(1.2)
    base = results.trials[0].config.replace(micro_batch_size=8, data_parallel="ddp", precision="fp32", tf32=None)
    results.trials[0].config = base
    results.workload.model = ModelFacts(parameter_count=1000, has_conv2d=False, repeated_blocks=2, optimizer_class="AdamW",
                                        layout=dataclasses.replace(LAYOUT, blocks=2))
    session = _Session(results, dict.fromkeys(["layout-tp2", "layout-pp2-gpipe-m4", "layout-pp2-1f1b-m4", "layout-pp2-gpipe-m8",
                                               "layout-pp2-1f1b-m8"], 10.0))
    workload = Workload(model=lambda: None, loss=lambda m, b: None, batches=lambda n: [], batch_size=8)
    table = run_layout_search(session, workload, base)
    dp2 = next(r for r in table.rows if r.layout == "dp2")
    assert dp2.status == "measured" and dp2.reason is not None and dp2.reason.code == "layout_under_load"
    results.workload.model = None
    assert run_layout_search(session, workload, base) is None and results.notes[-1].code == "layout_search_not_run"


def test_an_interrupted_analysis_still_ranks_the_layouts_it_measured():
    """Ctrl-C before the layout search: the table is built from the runs the sweep made (dp2 is the baseline, tp2 its
    tensor_parallel run), nothing new is measured, and every other survivor says why it has no figure."""
    from perfscope.search.layout import run_layout_search

    results, base = _two_rank_ddp_results()
    session = _Session(results, {})
    workload = Workload(model=lambda: None, loss=lambda m, b: None, batches=lambda n: [], batch_size=8)
    tp2 = next(c for c in layout_candidates(base, results.workload.model, bytes_per_parameter=16.0,
                                            memory_limit=32 * GiB, wraps_model=False) if c.row.layout == "tp2")
    session.rates["tensor_parallel"] = 50.0
    session.measure("tensor_parallel", tp2.config, ["tensor_parallel"])  # the sweep's own run of the knob
    session.measured.clear()
    table = run_layout_search(session, workload, base, not_measuring="the analysis was interrupted before it ran")
    assert session.measured == []  # nothing new started
    measured = {r.layout: r.configuration for r in table.measured()}
    assert measured == {"dp2": "baseline", "tp2": "tensor_parallel"}
    unmeasured = [r for r in table.rows if r.status != "measured" and r.reason is not None and r.reason.code == "layout_not_measured"]
    assert unmeasured and all(r.reason == msg("layout_not_measured", why="the analysis was interrupted before it ran")
                              for r in unmeasured)
    assert results.layouts is table
