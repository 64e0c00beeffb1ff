"""Each knob: applies or says why not, changes the config when applied, carries its code change and semantics.

One case per knob (adding a knob = one module + one registry line + a case here). Contexts are built from
fake facts for the device-specific decisions, and from the real example/test workloads for the model facts.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from perfscope.knobs import REGISTRY, Knob, KnobContext, Loop, active_knobs, knob, knob_ids, loader_options, observe_loop
from perfscope.knobs.adamw_8bit import installed_version as REAL_INSTALLED_VERSION
from perfscope.results import Environment, ModelFacts, ModelLayout
from perfscope.results.breakdown import SLICES
from perfscope.results.config import TrialConfig
from perfscope.results.messages import msg
from perfscope.trial.validate import inspect_model
from perfscope.workload import Workload, load_workload

ROOT = Path(__file__).resolve().parent.parent
H100 = Environment(device_type="cuda", device_name="NVIDIA H100 80GB HBM3", compute_capability="9.0", cpu_cores_logical=16)
V100 = Environment(device_type="cuda", device_name="Tesla V100-SXM2-16GB", compute_capability="7.0", cpu_cores_logical=8)
T4_LIKE = Environment(device_type="cuda", device_name="an old GPU", compute_capability="6.1", cpu_cores_logical=8)
CPU2 = Environment(device_type="cpu", device_name="cpu", cpu_cores_logical=2)
CPU1 = Environment(device_type="cpu", device_name="cpu", cpu_cores_logical=1)
OLD_TORCH = Environment(device_type="cuda", device_name="NVIDIA H100 80GB HBM3", compute_capability="9.0", torch_version="2.4.1+cu121")
NUMA2 = Environment(device_type="cuda", device_name="NVIDIA H100 80GB HBM3", compute_capability="9.0", cpu_cores_logical=16,
                    torch_version="2.9.0+cu128", numa_nodes=2)
NUMA1 = dataclasses.replace(NUMA2, numa_nodes=1)
NUMA2_OLD_TORCH = dataclasses.replace(NUMA2, torch_version="2.8.0+cu128")
NUMA_UNKNOWN = dataclasses.replace(NUMA2, numa_nodes=None, unavailable={"numa_nodes": msg("numa_not_linux", system="darwin")})


@pytest.fixture(autouse=True)
def no_8bit_optimizer_installed(monkeypatch):
    """The cases below do not depend on what this machine has installed; `installed` tests choose it."""
    monkeypatch.setattr("perfscope.knobs.adamw_8bit.installed_version", lambda package: None)


def _workload(dataset: bool = False, wraps_model: bool = False) -> Workload:
    if dataset:
        return Workload(model=lambda: None, loss=lambda m, b: None, dataset=list, batch_size=8, wraps_model=wraps_model)
    return Workload(model=lambda: None, loss=lambda m, b: None, batches=lambda n: [], batch_size=8, wraps_model=wraps_model)


def ctx(*, machine: Environment = H100, conv: bool = False, blocks: int = 12, dataset: bool = False,
        optimizer: str = "AdamW", user_tf32: bool | None = None, wraps_model: bool = False, **base: object) -> KnobContext:
    return KnobContext(
        workload=_workload(dataset, wraps_model),
        base=TrialConfig(device=machine.device_type, micro_batch_size=8, **base),  # type: ignore[arg-type]
        environment=machine,
        model=ModelFacts(parameter_count=1000, has_conv2d=conv, repeated_blocks=blocks, optimizer_class=optimizer,
                         matmul_tf32=user_tf32),
    )


def dp(**base: object) -> KnobContext:
    """A 2-rank run whose model perfscope wraps (DDP unless ``data_parallel`` says otherwise)."""
    return ctx(**{"nproc_per_node": 2, "data_parallel": "ddp", **base})  # type: ignore[arg-type]


def wrapped(**base: object) -> KnobContext:
    """A 2-rank run of a workload that wraps its own model: the harness wraps nothing (data_parallel "none")."""
    return ctx(wraps_model=True, nproc_per_node=2, **base)  # type: ignore[arg-type]


def split(context: KnobContext, **layout: object) -> KnobContext:
    """``context`` whose model the probe could split: 4 blocks, a TP plan for every degree unless told otherwise."""
    facts = ModelLayout(**{"blocks": 4, "block_parameter_count": 800, "tp_parameter_count": 700, **layout})  # type: ignore[arg-type]
    return dataclasses.replace(context, model=dataclasses.replace(context.model, layout=facts))


def replaced(context: KnobContext, optimizer: str) -> KnobContext:
    """``context`` whose baseline already steps a replacement optimizer."""
    return dataclasses.replace(context, base=context.base.replace(optimizer=optimizer))


CASES = [
    # (knob id, context, expected: None = applies, else a phrase of the reason)
    ("amp_bf16", ctx(), None),
    ("amp_bf16", ctx(machine=CPU2), None),  # CPU autocast supports bf16
    ("amp_bf16", ctx(machine=V100), "compute capability ≥ 8.0"),
    ("amp_bf16", ctx(precision="bf16"), "already runs bf16"),
    ("amp_fp16", ctx(), None),
    ("amp_fp16", ctx(machine=V100), None),
    ("amp_fp16", ctx(machine=T4_LIKE), "≥ 7.0"),
    ("amp_fp16", ctx(machine=CPU2), "on CPU use bf16"),
    ("amp_fp16", ctx(precision="fp16"), "already runs fp16"),
    ("tf32", ctx(), None),
    ("tf32", ctx(machine=CPU2), "NVIDIA GPUs"),
    ("tf32", ctx(machine=V100), "≥ 8.0"),
    ("tf32", ctx(tf32=True), "already on"),
    ("tf32", ctx(user_tf32=True), "set by the workload file"),  # the baseline (tf32=None) runs with the user's TF32
    ("tf32", ctx(user_tf32=False), None),
    ("tf32", ctx(precision="bf16"), "not fp32"),
    ("compile", ctx(), None),
    ("compile", ctx(compile="default"), "already compiled"),
    ("compile_reduce_overhead", ctx(), None),
    ("compile_reduce_overhead", ctx(machine=CPU2), "need a GPU"),
    ("compile_reduce_overhead", ctx(compile="reduce-overhead"), "already compiled"),
    ("compile_reduce_overhead", ctx(grad_accum_steps=4), "pytorch/pytorch#169545"),  # .grad overwritten by replays
    ("fused_optimizer", ctx(), None),
    ("fused_optimizer", ctx(optimizer="Lion"), "no fused implementation"),
    ("fused_optimizer", ctx(optimizer_impl="fused"), "already fused"),
    ("channels_last", ctx(conv=True), None),
    ("channels_last", ctx(), "no 2-D convolutions"),
    ("channels_last", ctx(conv=True, channels_last=True), "already on"),
    ("dataloader_workers", ctx(dataset=True), None),
    ("dataloader_workers", ctx(), "not a Dataset"),
    ("dataloader_workers", ctx(machine=CPU1, dataset=True), "one CPU core"),
    ("persistent_workers", ctx(dataset=True), None),
    ("persistent_workers", ctx(), "not a Dataset"),
    ("persistent_workers", ctx(dataset=True, num_workers=2, persistent_workers=True), "already on"),
    ("prefetch_factor", ctx(dataset=True), None),
    ("prefetch_factor", ctx(dataset=True, num_workers=2, prefetch_factor=4), "already 4"),
    ("pin_memory", ctx(dataset=True), None),
    ("pin_memory", ctx(machine=CPU2, dataset=True), "on the CPU"),
    ("pin_memory", ctx(dataset=True, pin_memory=True), "already on"),
    ("gc_freeze", ctx(), None),
    ("gc_freeze", ctx(gc_mode="disable"), "already managed"),
    ("expandable_segments", ctx(), None),
    ("expandable_segments", ctx(machine=CPU2), "CUDA caching allocator"),
    ("expandable_segments", ctx(env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}), "already sets expandable_segments"),
    ("expandable_segments", ctx(env={"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:512,expandable_segments:False"}),
     "already sets expandable_segments:False"),
    ("expandable_segments", ctx(env={"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"}), "cudaMallocAsync"),
    ("expandable_segments", ctx(env={"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:512"}), None),
    ("activation_checkpointing", ctx(), None),
    ("activation_checkpointing", ctx(blocks=0), "no repeated blocks"),
    ("activation_checkpointing", ctx(activation_checkpointing=True), "already on"),
    ("activation_offloading", ctx(), None),
    ("activation_offloading", ctx(machine=CPU2), "in host memory already"),
    ("activation_offloading", ctx(offload_activations=True), "already on"),
    ("adafactor", ctx(), None),
    ("adafactor", ctx(machine=CPU2), None),  # runs on CPU too: the one lean optimizer this machine measures
    ("adafactor", ctx(optimizer="Adam"), None),
    ("adafactor", ctx(machine=OLD_TORCH), "needs torch ≥ 2.5"),
    ("adafactor", ctx(optimizer="SGD"), "stands in for Adam/AdamW"),
    ("adafactor", replaced(ctx(), "8bit-bnb"), "already replaced"),
    ("adamw_8bit", ctx(), "no 8-bit optimizer is installed"),
    ("adamw_8bit", ctx(machine=CPU2), "perfscope[lowmem]"),
    ("adamw_8bit", ctx(optimizer="SGD"), "stands in for Adam/AdamW"),
    ("dataloader_workers", dp(machine=CPU2, dataset=True), "one CPU core per rank (2 for 2 ranks)"),
    # data parallel: a 2-rank run whose model perfscope wraps; never one process, never the user's own wrapper
    ("fsdp2", dp(), None),
    ("fsdp2", dp(machine=CPU2), None),  # FSDP2 runs on gloo
    ("fsdp2", dp(data_parallel="zero1"), None),
    ("fsdp2", dp(data_parallel="fsdp"), "already shards the model with FSDP"),
    ("fsdp2", ctx(), "one process (world size 1)"),
    ("fsdp2", wrapped(), "wraps its own model"),
    ("fsdp_mixed_precision", dp(), None),  # measured on top of fsdp2's best variant
    ("fsdp_mixed_precision", dp(data_parallel="fsdp"), None),
    ("fsdp_mixed_precision", dp(data_parallel="fsdp", fsdp_mixed_precision="bf16"), "already gathers and reduces in bf16"),
    ("fsdp_mixed_precision", dp(machine=V100), "compute capability ≥ 8.0"),
    ("fsdp_mixed_precision", ctx(), "one process"),
    ("zero1", dp(), None),
    ("zero1", dp(machine=CPU2), None),
    ("zero1", dp(data_parallel="zero1"), "already shards the optimizer state"),
    ("zero1", dp(data_parallel="fsdp"), "FSDP already shards the optimizer state"),
    ("zero1", ctx(), "one process"),
    ("zero1", wrapped(), "wraps its own model"),
    ("ddp_bucket_cap", dp(), None),
    ("ddp_bucket_cap", dp(data_parallel="zero1"), None),
    ("ddp_bucket_cap", dp(data_parallel="fsdp"), "bucket_cap_mb is a DistributedDataParallel setting"),
    ("ddp_bucket_cap", ctx(), "one process"),
    ("ddp_bucket_cap", wrapped(), "wraps its own model"),
    ("ddp_bucket_view", dp(), None),
    ("ddp_bucket_view", dp(gradient_as_bucket_view=True), "already on"),
    ("ddp_bucket_view", dp(data_parallel="fsdp"), "DistributedDataParallel setting"),
    ("ddp_bucket_view", ctx(machine=CPU2), "one process"),
    ("ddp_static_graph", dp(), None),
    ("ddp_static_graph", dp(static_graph=True), "already on"),
    ("ddp_static_graph", dp(data_parallel="fsdp"), "DistributedDataParallel setting"),
    ("ddp_static_graph", wrapped(), "wraps its own model"),
    ("no_sync_accumulation", dp(), None),  # no accumulation: tries accumulating 2 and 4 (global batch grows)
    ("no_sync_accumulation", dp(grad_accum_steps=4), None),  # accumulates with a sync per micro-batch
    ("no_sync_accumulation", dp(data_parallel="fsdp", grad_accum_steps=2), None),
    ("no_sync_accumulation", dp(grad_accum_steps=4, no_sync=True), "already skips the gradient sync"),
    ("no_sync_accumulation", ctx(grad_accum_steps=4), "one process"),
    ("no_sync_accumulation", wrapped(grad_accum_steps=4), "wraps its own model"),
    ("grad_compression", dp(), None),
    ("grad_compression", dp(machine=CPU2), None),  # fp16 on gloo
    ("grad_compression", dp(data_parallel="zero1"), None),
    ("grad_compression", dp(comm_hook="fp16"), "already has a communication hook (fp16)"),
    ("grad_compression", dp(data_parallel="fsdp"), "a communication hook is a DistributedDataParallel setting"),
    ("grad_compression", ctx(), "no data-parallel ranks and no gradient communication"),
    ("grad_compression", wrapped(), "wraps its own model"),
    ("numa_binding", dp(machine=NUMA2), None),
    ("numa_binding", wrapped(machine=NUMA2), None),  # a torchrun option: whoever wraps the model
    ("numa_binding", dp(machine=NUMA2, numa_binding="node"), "already bound (--numa-binding=node)"),
    ("numa_binding", dp(machine=NUMA1), "one NUMA node"),
    ("numa_binding", dp(machine=NUMA2_OLD_TORCH), "needs PyTorch ≥ 2.9 (this run: 2.8.0+cu128)"),
    ("numa_binding", dp(machine=NUMA_UNKNOWN), "NUMA node count is unknown (read from /sys/devices/system/node on Linux; this platform is darwin)"),
    ("numa_binding", dp(machine=CPU2), "this run has no GPU"),
    ("numa_binding", ctx(machine=NUMA2), "one process"),
    ("tensor_parallel", split(dp()), None),
    ("tensor_parallel", split(dp(nproc_per_node=4)), None),  # and 2-D: FSDP2 × TP
    ("tensor_parallel", dp(), "could not read how the model splits"),
    ("tensor_parallel", split(dp(), tp_inapplicable={"2": msg("tp_packed_qkv", name="qkv", fan_in=4, fan_out=12)}),
     "tp = 2: packed q/k/v"),
    ("tensor_parallel", split(wrapped()), "wraps its own model"),
    ("pipeline_parallel", split(dp()), None),  # 4 blocks: interleaved too
    ("pipeline_parallel", split(dp(), blocks=2), None),
    ("pipeline_parallel", split(dp(), blocks=3), "3 layers are not divisible by pp = 2"),
    ("pipeline_parallel", split(dp(activation_checkpointing=True)), "without activation checkpointing"),
    ("pipeline_parallel", ctx(), "one process"),
    ("micro_batch", ctx(), None),
    ("grad_accum", ctx(grad_accum_steps=4), None),
    ("grad_accum", ctx(), "does not accumulate"),
]


def test_every_registered_knob_has_a_case_here():
    assert {c[0] for c in CASES} == set(knob_ids())
    assert len(knob_ids()) == len(set(knob_ids())), "knob ids must be unique"


@pytest.mark.parametrize(("knob_id", "context", "expected"), CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_knob_applies_or_explains_itself(knob_id, context, expected):
    k = knob(knob_id)
    reason = k.applies(context)
    if expected is None:
        assert reason is None
        if k.search == "variants":
            start = context.base
            if k.builds_on is not None and not k.prerequisite_met(start):
                prerequisite = knob(k.builds_on)  # measured on top of its prerequisite's variant
                start = prerequisite.apply(start, prerequisite.variants(context)[0])
                assert k.prerequisite_met(start)
            variants = k.variants(context)
            assert variants, "an applicable knob has something to try"
            for changes in variants:
                assert k.apply(start, changes) != start  # a variant always changes something
    else:
        assert reason is not None and expected in reason, reason


@pytest.mark.parametrize("k", REGISTRY, ids=lambda k: k.id)
def test_knob_attributes(k):
    assert k.id and k.id == k.id.lower() and " " not in k.id
    assert k.title and k.reference.startswith("https://")
    lines = k.code_change(ctx()).splitlines()
    assert lines and any(line.startswith("+") for line in lines), "code_change is a diff: at least one added line"


@pytest.mark.parametrize("k", REGISTRY, ids=lambda k: k.id)
def test_knob_declares_real_fields_and_slices(k):
    """What other modules read from a knob must name real things: TrialConfig fields (the hooks' unknown settings,
    `active`) and breakdown slices (a finding's `addresses`)."""
    assert set(k.fields) <= {f.name for f in dataclasses.fields(TrialConfig)}  # none: it lives in knob_settings
    assert k.settings == (k.fields or (f"knob_settings.{k.id}",))
    assert set(k.addresses) <= set(SLICES) | {"step"}
    assert k.search in ("variants", "micro_batch")
    assert not k.active(ctx().base), "the default configuration runs no knob"
    for changes in (k.variants(ctx()) if k.search == "variants" and k.applies(ctx()) is None else []):
        assert k.active(k.apply(ctx().base, changes)) or not _has_trial_hooks(k), "a variant turns its own knob on"


def _has_trial_hooks(k) -> bool:
    hooks = ("before_steps", "apply_to_model", "apply_to_step_module", "apply_to_loader", "apply_to_batch",
             "loss_context", "step_context", "window_context", "grad_scaler")
    return any(getattr(type(k), h) is not getattr(Knob, h) for h in hooks)


def test_the_loop_asks_the_registry_which_knobs_a_config_runs():
    config = TrialConfig(micro_batch_size=8, precision="bf16", compile="default", tf32=True, channels_last=True,
                         gc_mode="freeze", num_workers=2, prefetch_factor=4, pin_memory=True, activation_checkpointing=True)
    assert [k.id for k in active_knobs(config)] == ["amp_bf16", "tf32", "compile", "channels_last", "dataloader_workers",
                                                    "prefetch_factor", "pin_memory", "gc_freeze", "activation_checkpointing"]
    assert [k.id for k in active_knobs(config.replace(precision="fp16", compile="reduce-overhead"))][:2] == [
        "amp_fp16", "tf32"]  # knobs sharing a field each claim their own value
    assert loader_options(config) == {"num_workers": 2, "prefetch_factor": 4, "pin_memory": False}  # pinning: GPU only
    assert loader_options(config.replace(device="cuda"))["pin_memory"] is True
    # What no built-in knob reads itself and the hooks cannot see (observed_by_hooks=False): unknown, never the default.
    assert observe_loop(Loop(device="cpu")) == ({}, ["optimizer_impl", "channels_last", "gc_mode",
                                                     "activation_checkpointing", "offload_activations"])


@pytest.mark.parametrize("k", REGISTRY, ids=lambda k: k.id)
def test_code_change_is_written_for_the_runs_device(k):
    """A CPU run's advice never mentions CUDA (None where the knob means nothing on a CPU); a GPU run's never
    builds the model or autocasts without the GPU."""
    cpu = k.code_change(ctx(machine=CPU2))
    assert cpu is None or ("cuda" not in cpu.lower() and any(line.startswith("+") for line in cpu.splitlines())), cpu
    gpu = k.code_change(ctx())
    assert gpu is not None and '"cpu"' not in gpu
    assert not re.search(r"MyNet\(\)(?!\.cuda\(\))", gpu), gpu  # the model is placed on the GPU
    if "autocast" in gpu or "GradScaler" in gpu:
        assert 'device_type="cuda"' in gpu or 'GradScaler("cuda")' in gpu


@pytest.mark.parametrize("probed", ["NEW_ONLY", "MIXED_CHECK"])
def test_tf32_code_change_follows_the_runs_torch(monkeypatch, probed):
    import torch

    from perfscope import tf32_api

    monkeypatch.setattr(tf32_api, "probe_installed_torch", lambda: getattr(tf32_api, probed))
    this = Environment(device_type="cuda", device_name="NVIDIA H100 80GB HBM3", compute_capability="9.0",
                       torch_version=torch.__version__)
    old = Environment(device_type="cuda", device_name="NVIDIA H100 80GB HBM3", compute_capability="9.0", torch_version="2.4.1+cu121")
    code = knob("tf32").code_change(ctx(machine=this))
    if probed == "NEW_ONLY":
        assert code == '+torch.backends.cuda.matmul.fp32_precision = "tf32"'
    else:
        assert code.startswith("+torch.backends.cuda.matmul.allow_tf32 = True   #") and "166387" in code
    assert knob("tf32").code_change(ctx(machine=old)) == "+torch.backends.cuda.matmul.allow_tf32 = True"


def test_apply_merges_env():
    base = TrialConfig(device="cuda", micro_batch_size=8, env={"OTHER": "1"})
    changed = knob("expandable_segments").apply(base, knob("expandable_segments").variants(ctx())[0])
    assert changed.env == {"OTHER": "1", "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}


def test_expandable_segments_keeps_the_users_allocator_options(monkeypatch):
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    k = knob("expandable_segments")
    c = ctx(env={"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:512,roundup_power2_divisions:[256:1,512:2]"})
    merged = "max_split_size_mb:512,roundup_power2_divisions:[256:1,512:2],expandable_segments:True"
    assert k.variants(c) == [{"env": {"PYTORCH_CUDA_ALLOC_CONF": merged}}]
    assert f"+export PYTORCH_CUDA_ALLOC_CONF={merged}" in k.code_change(c)
    # Set in the shell perfscope runs from (the trial processes inherit it), not in the config:
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "garbage_collection_threshold:0.6")
    assert k.variants(ctx())[0]["env"]["PYTORCH_CUDA_ALLOC_CONF"] == "garbage_collection_threshold:0.6,expandable_segments:True"
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    assert "already sets" in k.applies(ctx())


def test_changes_semantics():
    c = ctx()
    assert knob("amp_bf16").changes_semantics(c, c.base.replace(precision="bf16")) == [msg("numerics", change=msg("bf16_matmuls"))]
    assert knob("amp_fp16").changes_semantics(c, c.base.replace(precision="fp16")) == [msg("numerics", change=msg("fp16_loss_scaling"))]
    assert knob("tf32").changes_semantics(c, c.base.replace(tf32=True)) == [msg("numerics", change=msg("tf32_matmuls"))]
    assert knob("compile").changes_semantics(c, c.base.replace(compile="default")) == []
    # a micro-batch change without accumulation changes the global batch: flagged, with the LR note
    assert knob("micro_batch").changes_semantics(c, c.base.replace(micro_batch_size=32)) == [msg("global_batch", before=8, after=32)]
    # with accumulation keeping the global batch: no semantics change
    acc = ctx(grad_accum_steps=4)
    assert knob("micro_batch").changes_semantics(acc, acc.base.replace(micro_batch_size=32, grad_accum_steps=1)) == []
    assert knob("grad_accum").changes_semantics(acc, acc.base.replace(micro_batch_size=32, grad_accum_steps=1)) == []


def test_dataloader_worker_counts_follow_the_cores():
    assert [v["num_workers"] for v in knob("dataloader_workers").variants(ctx(machine=CPU2, dataset=True))] == [1, 2]
    assert [v["num_workers"] for v in knob("dataloader_workers").variants(ctx(dataset=True))] == [8]
    assert knob("persistent_workers").builds_on == "dataloader_workers"
    assert not knob("persistent_workers").prerequisite_met(TrialConfig(micro_batch_size=8))
    assert knob("prefetch_factor").prerequisite_met(TrialConfig(micro_batch_size=8, num_workers=2))


def test_compile_needs_a_host_compiler_on_cpu_and_cuda(monkeypatch):
    import perfscope.knobs.compile as compile_module

    monkeypatch.setattr(compile_module.shutil, "which", lambda name: None)
    monkeypatch.delenv("CC", raising=False)
    assert "C++ compiler" in knob("compile").applies(ctx(machine=CPU2))
    # CUDA too: Triton compiles its kernel launcher with the host C compiler at run time.
    assert "Triton" in knob("compile").applies(ctx())
    assert "Triton" in knob("compile_reduce_overhead").applies(ctx())
    monkeypatch.setattr(compile_module.shutil, "which", lambda name: "/opt/cc/bin/mycc" if name == "mycc" else None)
    monkeypatch.setenv("CC", "mycc")
    assert knob("compile").applies(ctx()) is None


@pytest.mark.parametrize(
    ("path", "conv", "blocks"),
    [
        (ROOT / "examples" / "tiny_transformer.py", False, 2),
        (ROOT / "examples" / "small_convnet.py", True, None),
        (ROOT / "tests" / "workloads" / "sweep_oom.py", False, 3),
    ],
)
def test_model_facts_from_real_workloads(path, conv, blocks):
    facts = inspect_model(load_workload(path))
    assert facts.has_conv2d is conv
    assert facts.parameter_count > 0 and facts.optimizer_class in ("AdamW", "Adam", "SGD")
    if blocks is not None:
        assert facts.repeated_blocks == blocks


def test_real_context_decides_channels_last_and_dataloader_knobs():
    conv = load_workload(ROOT / "examples" / "small_convnet.py")
    data = load_workload(ROOT / "tests" / "workloads" / "sweep_dataset.py")
    for workload, knob_id in ((conv, "channels_last"), (data, "dataloader_workers")):
        c = KnobContext(workload=workload, base=TrialConfig(micro_batch_size=workload.batch_size), environment=CPU2,
                        model=inspect_model(workload))
        assert knob(knob_id).applies(c) is None


# ------------------------------------------------------------------------------ memory and recipe levers


@pytest.mark.parametrize(
    ("installed", "context", "expected"),
    [
        ({"torchao": (0, 18)}, ctx(machine=CPU2), ["8bit-torchao"]),  # torchao runs on CPU (its step is torch.compiled)
        ({"torchao": (0, 18)}, ctx(), ["8bit-torchao"]),
        ({"bitsandbytes": (0, 50)}, ctx(), ["8bit-bnb"]),
        ({"torchao": (0, 18), "bitsandbytes": (0, 50)}, ctx(), ["8bit-torchao", "8bit-bnb"]),  # both tried, the faster kept
        ({"torchao": (0, 18), "bitsandbytes": (0, 50)}, ctx(machine=CPU2), ["8bit-torchao"]),
        ({"bitsandbytes": (0, 50)}, ctx(machine=CPU2), "bitsandbytes's 8-bit optimizers need CUDA"),
        ({"torchao": (0, 9)}, ctx(), "torchao 0.9 is older than 0.10"),
    ],
)
def test_8bit_adamw_uses_what_is_installed_where_it_runs(monkeypatch, installed, context, expected):
    monkeypatch.setattr("perfscope.knobs.adamw_8bit.installed_version", installed.get)
    k = knob("adamw_8bit")
    reason = k.applies(context)
    if isinstance(expected, str):
        assert reason is not None and expected in reason, reason
        return
    assert reason is None
    assert [v["optimizer"] for v in k.variants(context)] == expected
    assert all(k.apply(context.base, v).optimizer in expected for v in k.variants(context))


def test_8bit_adamw_with_torchao_needs_a_compiler(monkeypatch):
    import perfscope.knobs.compile as compile_module

    monkeypatch.setattr("perfscope.knobs.adamw_8bit.installed_version", {"torchao": (0, 18)}.get)
    monkeypatch.setattr(compile_module.shutil, "which", lambda name: None)
    monkeypatch.delenv("CC", raising=False)
    reason = knob("adamw_8bit").applies(ctx(machine=CPU2))
    assert "torchao compiles its optimizer step" in reason and "C++ compiler" in reason


def test_8bit_adamw_on_this_machine_says_why_not(monkeypatch):
    """What this machine has installed, unpatched: the dev and CI venvs have no 8-bit implementation (the lowmem
    extra is not installed), so the knob says so; where one is installed it applies or names it in its reason."""
    monkeypatch.setattr("perfscope.knobs.adamw_8bit.installed_version", REAL_INSTALLED_VERSION)
    found = [p for p in ("torchao", "bitsandbytes") if REAL_INSTALLED_VERSION(p) is not None]
    reason = knob("adamw_8bit").applies(ctx(machine=CPU2))
    if not found:
        assert reason == "no 8-bit optimizer is installed: pip install 'perfscope[lowmem]' (torchao), or bitsandbytes on CUDA"
    else:
        assert reason is None or any(p in reason for p in found), reason


def test_optimizer_replacements_say_plainly_that_the_recipe_changes():
    c = ctx()
    for knob_id, optimizer in (("adafactor", "adafactor"), ("adamw_8bit", "8bit-torchao")):
        k = knob(knob_id)
        assert k.changes_recipe and k.frees == "optimizer state"
        (note,) = k.changes_semantics(c, c.base.replace(optimizer=optimizer))
        assert note.code == "training_recipe" and note.params["optimizer"] == "AdamW"
        assert note.params["replacement"] == k.replacement
    (note,) = knob("adafactor").changes_semantics(c, c.base.replace(optimizer="adafactor"))
    assert note.params["caveat"] == msg("adafactor_recipe", adam_decay=False)
    (note,) = knob("adafactor").changes_semantics(ctx(optimizer="Adam"), c.base)  # Adam's L2 decay changes
    assert note.params["caveat"] == msg("adafactor_recipe", adam_decay=True)
    assert knob("activation_offloading").changes_semantics(c, c.base.replace(offload_activations=True)) == []
    assert knob("activation_offloading").frees == knob("activation_checkpointing").frees == "activations"


def _run(name: str, *, state: int, optimizer: str, micro: int = 8, peak: int | None = None, transfers=None):
    from perfscope.results import MemoryBreakdown
    from tests.factories import make_trace_facts, make_trial

    trial = make_trial(name, batch=micro)
    trial.metrics.memory_breakdown = MemoryBreakdown(parameters=2**20, gradients=2**20, optimizer_state=state, activations_and_temporaries=None)
    trial.metrics.optimizer = optimizer
    trial.metrics.peak_memory_bytes = peak
    trial.metrics.trace_facts = make_trace_facts(host_transfers=transfers) if transfers is not None else None
    return trial


def test_lean_optimizer_notes_report_the_memory_it_freed():
    baseline = _run("baseline", state=8 * 2**20, optimizer="torch.optim.adamw.AdamW", peak=20 * 2**20)
    adafactor = _run("adafactor", state=2**14, optimizer="torch.optim.Adafactor", peak=13 * 2**20)
    notes = knob("adafactor").measured_notes(ctx(), baseline, adafactor)
    assert notes[0] == "optimizer state 8.0 MiB → 16.0 KiB: frees 8.0 MiB (100%)"
    assert "peak memory 20.0 MiB → 13.0 MiB at micro-batch 8" in notes
    assert "stepped torch.optim.Adafactor" in notes
    # at another micro-batch the peaks are not comparable; on CPU there is no allocator peak
    paired = _run("adafactor-mb16", state=2**14, optimizer="torch.optim.Adafactor", micro=16, peak=30 * 2**20)
    assert not any("peak memory" in n for n in knob("adafactor").measured_notes(ctx(), baseline, paired))
    assert not any("peak memory" in n for n in knob("adafactor").measured_notes(ctx(machine=CPU2), baseline, adafactor))


def test_offloading_notes_report_the_copies_it_adds_from_the_trace():
    from perfscope.results import HostTransfers

    baseline = _run("baseline", state=0, optimizer="x", transfers=HostTransfers(h2d_bytes=2**20, d2h_bytes=0, time_s=1e-4,
                                                                                overlapped_fraction=0.0))
    offload = _run("activation_offloading-mb32", state=0, optimizer="x",
                   transfers=HostTransfers(h2d_bytes=65 * 2**20, d2h_bytes=64 * 2**20, time_s=0.012, overlapped_fraction=0.75))
    notes = knob("activation_offloading").measured_notes(ctx(), baseline, offload)
    assert notes[0].startswith("adds 128.0 MiB of host↔device copies per step (129.0 MiB in all; device→host 64.0 MiB")
    assert notes[1] == "75% of the copy time overlapped kernels (12.0 ms of copies per step, from the trace)"
    untraced = _run("activation_offloading-mb32", state=0, optimizer="x")
    untraced.metrics.unavailable["trace"] = msg("trace_capture_failed", error="boom")
    assert knob("activation_offloading").measured_notes(ctx(), baseline, untraced) == [
        "host↔device copy traffic unknown: trace capture failed: boom"]


# ------------------------------------------------------------------------------------------- data parallel


def test_sharding_knobs_try_both_fsdp2_reshard_modes_and_zero1_and_free_optimizer_state():
    c = dp()
    assert knob("fsdp2").variants(c) == [{"data_parallel": "fsdp", "reshard_after_forward": True},
                                         {"data_parallel": "fsdp", "reshard_after_forward": False}]
    assert knob("zero1").variants(c) == [{"data_parallel": "zero1"}]
    # what they free pays through the micro-batch it lets fit: the sweep pairs them with it, as the lean optimizers
    assert knob("fsdp2").frees == knob("zero1").frees == "optimizer state"
    for knob_id in ("fsdp2", "zero1"):
        assert knob(knob_id).changes_semantics(c, knob(knob_id).apply(c.base, knob(knob_id).variants(c)[0])) == []
    assert knob("fsdp2").apply(c.base, {"data_parallel": "fsdp", "reshard_after_forward": False}).reshard_after_forward is False


def test_ddp_settings_and_their_variants():
    c = dp()
    assert knob("ddp_bucket_cap").variants(c) == [{"bucket_cap_mb": 5.0}, {"bucket_cap_mb": 100.0}]  # torch's default: 25
    assert knob("ddp_bucket_cap").variants(dp(bucket_cap_mb=100.0)) == [{"bucket_cap_mb": 5.0}]
    assert knob("ddp_bucket_view").variants(c) == [{"gradient_as_bucket_view": True}]
    assert knob("ddp_static_graph").variants(c) == [{"static_graph": True}]
    assert knob("ddp_static_graph").changes_semantics(c, c.base.replace(static_graph=True)) == [msg("static_graph")]
    assert knob("ddp_bucket_view").changes_semantics(c, c.base.replace(gradient_as_bucket_view=True)) == []


def test_data_parallel_knobs_never_stack_onto_a_wrapper_their_settings_do_not_apply_to():
    ddp = dp().base
    fsdp = dp(data_parallel="fsdp").base
    for knob_id in ("ddp_bucket_cap", "ddp_bucket_view", "ddp_static_graph", "grad_compression"):
        assert knob(knob_id).compatible(ddp) and knob(knob_id).compatible(dp(data_parallel="zero1").base)
        assert not knob(knob_id).compatible(fsdp), knob_id  # applying it would be an invalid TrialConfig
    assert knob("fsdp2").compatible(ddp) and knob("fsdp2").compatible(dp(data_parallel="zero1").base)
    assert not knob("fsdp2").compatible(ddp.replace(bucket_cap_mb=5.0))
    assert not knob("fsdp2").compatible(ddp.replace(comm_hook="fp16"))
    assert not knob("zero1").compatible(fsdp) and not knob("fsdp_mixed_precision").compatible(ddp)
    assert knob("no_sync_accumulation").compatible(fsdp) and knob("numa_binding").compatible(fsdp)


def test_fsdp_mixed_precision_builds_on_fsdp2_and_says_what_it_rounds():
    k, c = knob("fsdp_mixed_precision"), dp()
    assert k.builds_on == "fsdp2"
    assert not k.prerequisite_met(c.base) and k.prerequisite_met(dp(data_parallel="fsdp").base)
    on_fsdp = knob("fsdp2").apply(c.base, knob("fsdp2").variants(c)[1])
    config = k.apply(on_fsdp, k.variants(c)[0])
    assert config.fsdp_mixed_precision == "bf16" and config.reshard_after_forward is False
    assert k.changes_semantics(c, config) == [msg("numerics", change=msg("low_precision_params", dtype="bf16"))]
    assert k.changes_semantics(c, on_fsdp) == []


def test_no_sync_keeps_the_global_batch_of_a_loop_that_accumulates():
    c = dp(grad_accum_steps=4)
    assert knob("no_sync_accumulation").variants(c) == [{"no_sync": True}]
    config = knob("no_sync_accumulation").apply(c.base, {"no_sync": True})
    assert config.global_batch == c.base.global_batch == 64
    assert knob("no_sync_accumulation").changes_semantics(c, config) == []


def test_no_sync_accumulation_of_a_loop_that_does_not_accumulate_says_the_global_batch_grows():
    c = dp()  # micro-batch 8, no accumulation, 2 ranks: global batch 16
    k = knob("no_sync_accumulation")
    assert k.variants(c) == [{"grad_accum_steps": 2, "no_sync": True}, {"grad_accum_steps": 4, "no_sync": True}]
    config = k.apply(c.base, k.variants(c)[1])
    assert config.micro_batch_size == 8 and config.global_batch == 64
    assert k.changes_semantics(c, config) == [msg("global_batch", before=16, after=64, parts_before="8 × 1 × 2",
                                                  parts_after="8 × 4 × 2")]
    assert "ACCUM = 2" in k.code_change(c) and "ACCUM = 2" not in k.code_change(dp(grad_accum_steps=4))
    assert "model.no_sync()" in k.code_change(c)
    assert "set_requires_gradient_sync(last)" in k.code_change(dp(data_parallel="fsdp", grad_accum_steps=2))


def test_micro_batch_note_counts_the_ranks_in_a_distributed_run():
    c = dp(grad_accum_steps=2)
    assert knob("micro_batch").changes_semantics(c, c.base.replace(micro_batch_size=16)) == [
        msg("global_batch", before=32, after=64, parts_before="8 × 2 × 2", parts_after="16 × 2 × 2")]
    assert knob("micro_batch").changes_semantics(c, c.base.replace(micro_batch_size=16, grad_accum_steps=1)) == []
    (note,) = knob("micro_batch").changes_semantics(ctx(), ctx().base.replace(micro_batch_size=32))
    assert "parts_before" not in note.params  # one process: no ranks to spell out


def test_grad_compression_tries_what_the_backend_supports():
    assert knob("grad_compression").variants(dp(machine=CPU2)) == [{"comm_hook": "fp16"}]  # torch: bf16 hook needs NCCL
    assert knob("grad_compression").variants(dp()) == [{"comm_hook": "bf16"}, {"comm_hook": "fp16"}]
    c = dp()
    assert knob("grad_compression").changes_semantics(c, c.base.replace(comm_hook="bf16")) == [
        msg("numerics", change=msg("compressed_gradients", hook="bf16"))]
    assert knob("grad_compression").changes_semantics(c, c.base) == []
    assert "fp16_compress_hook" in knob("grad_compression").code_change(dp(machine=CPU2))


def test_data_parallel_code_changes_use_the_runs_backend_and_device():
    cpu, gpu = knob("fsdp2").code_change(dp(machine=CPU2)), knob("fsdp2").code_change(dp())
    assert 'init_process_group("gloo")' in cpu and "-model = DistributedDataParallel(model)" in cpu
    assert 'init_process_group("nccl")' in gpu and "torch.cuda.set_device(local_rank)" in gpu
    assert "-model = DistributedDataParallel(model, device_ids=[local_rank])" in gpu
    assert "-optimizer = ZeroRedundancyOptimizer" in knob("fsdp2").code_change(dp(data_parallel="zero1"))
    assert ("+model = DistributedDataParallel(model, device_ids=[local_rank], bucket_cap_mb=MB)"
            in knob("ddp_bucket_cap").code_change(dp()))
    assert "+model = DistributedDataParallel(model, static_graph=True)" in knob("ddp_static_graph").code_change(dp(machine=CPU2))
    assert "optimizer_class=torch.optim.SGD" in knob("zero1").code_change(dp(optimizer="SGD"))
    assert knob("numa_binding").code_change(dp(machine=NUMA2)).endswith("--numa-binding=node train.py   # PyTorch ≥ 2.9")


def test_dataloader_workers_share_the_machine_between_local_ranks():
    assert [v["num_workers"] for v in knob("dataloader_workers").variants(ctx(dataset=True))] == [8]  # 16 cores
    assert [v["num_workers"] for v in knob("dataloader_workers").variants(dp(dataset=True))] == [4, 8]  # 8 per rank
    assert [v["num_workers"] for v in knob("dataloader_workers").variants(dp(dataset=True, nproc_per_node=4))] == [2, 4]


def test_sharding_knobs_report_the_state_per_rank_they_freed():
    from perfscope.results.distributed import DistributedFacts, RankMetrics
    from tests.factories import make_trial

    def run(name: str, *per_rank: tuple[int, int, int] | None):
        trial = make_trial(name)
        trial.metrics.distributed = DistributedFacts(world_size=len(per_rank), ranks=[
            RankMetrics(rank=i) if b is None else RankMetrics(rank=i, parameter_bytes=b[0], gradient_bytes=b[1],
                                                              optimizer_state_bytes=b[2])
            for i, b in enumerate(per_rank)])
        return trial

    mib = 2**20
    ddp = run("baseline", (4 * mib, 4 * mib, 8 * mib), (4 * mib, 4 * mib, 8 * mib))
    zero1 = run("zero1", (4 * mib, 4 * mib, 4 * mib), (4 * mib, 4 * mib, 5 * mib))  # the larger shard counts
    assert knob("zero1").measured_notes(dp(), ddp, zero1) == [
        "parameters + gradients + optimizer state per rank 16.0 MiB → 13.0 MiB: frees 3.0 MiB (19%) "
        "(optimizer state 8.0 MiB → 5.0 MiB; the largest rank, counted from its tensors)"]
    fsdp = run("fsdp2", (2 * mib, 2 * mib, 4 * mib), (2 * mib, 2 * mib, 4 * mib))
    assert "16.0 MiB → 8.0 MiB: frees 8.0 MiB (50%)" in knob("fsdp2").measured_notes(dp(), ddp, fsdp)[0]
    assert knob("fsdp2").measured_notes(dp(), ddp, run("fsdp2", (1, 1, 1), None)) == []  # a rank did not count
    assert knob("fsdp2").measured_notes(dp(), make_trial("baseline"), fsdp) == []  # one process: nothing per rank
