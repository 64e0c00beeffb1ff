"""Tensor parallelism inside a trial rank: a plan for the model's blocks, applied by PyTorch's own engine.

Design notes: docs/measurement.md."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from perfscope.knobs.apply.checkpointing import find_repeated_blocks, unwrapped
from perfscope.results.config import TrialConfig
from perfscope.results.messages import Message, msg
from perfscope.wording import words

QKV = re.compile(r"(^|[._])(q|k|v|wq|wk|wv|q_proj|k_proj|v_proj|query|key|value|to_q|to_k|to_v)$")
OUT = re.compile(r"(^|[._])(o|wo|o_proj|out_proj|proj|attn_proj|to_out|dense)$")
UP = re.compile(r"(^|[._])(w1|w3|up|gate|up_proj|gate_proj|fc1|c_fc|fc_in|dense_h_to_4h)$")
DOWN = re.compile(r"(^|[._])(w2|down|down_proj|fc2|fc_out|dense_4h_to_h)$")
PACKED = re.compile(r"(^|[._])(qkv|wqkv|c_attn|in_proj|query_key_value|qkv_proj)$")
HEAD_ATTRS = ("heads", "n_heads", "num_heads", "n_head", "nhead", "num_attention_heads", "n_kv_heads",
              "num_key_value_heads")
HEAD_DIM_ATTRS = ("head_dim", "d_head", "head_size")
STYLES = ("colwise", "rowwise", "sequence", "colwise_dtensor")


@dataclass
class TpPlan:
    """Module name → style; ``reason`` when no correct plan exists for this model and tp degree."""

    styles: dict[str, str] = field(default_factory=dict)
    source: str = ""
    reason: Message | None = None


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _heads_indivisible(module: nn.Module, tp: int) -> Message | None:
    """The first head count (any of HEAD_ATTRS, anywhere inside ``module``) that ``tp`` does not divide."""
    for name, sub in module.named_modules():
        for attr in HEAD_ATTRS:
            if _count(heads := getattr(sub, attr, None)) and heads % tp:
                return msg("tp_heads_indivisible", attr=f"{name}.{attr}" if name else attr, heads=heads, tp=tp)
    return None


def _mlp_pair(block: nn.Module) -> dict[str, str]:
    """An nn.Sequential holding exactly two Linears, the first expanding and the second contracting back."""
    out: dict[str, str] = {}
    for name, module in block.named_modules():
        if not isinstance(module, nn.Sequential):
            continue
        linears = [(n, m) for n, m in module.named_children() if isinstance(m, nn.Linear)]
        if len(linears) == 2:
            (n1, l1), (n2, l2) = linears
            if l1.out_features > l1.in_features and l2.in_features == l1.out_features and l2.out_features == l1.in_features:
                prefix = f"{name}." if name else ""
                out[prefix + n1], out[prefix + n2] = "colwise", "rowwise"
    return out


def block_plan(block: nn.Module, tp: int) -> tuple[dict[str, str], Message | None]:
    """The styles for one block's Linears (names relative to the block), or the reason there is no correct one."""
    styles = _mlp_pair(block)
    for name, module in block.named_modules():
        if not isinstance(module, nn.Linear) or name in styles:
            continue
        if PACKED.search(name):
            return {}, msg("tp_packed_qkv", name=name, fan_in=module.in_features, fan_out=module.out_features)
        if QKV.search(name) or UP.search(name):
            styles[name] = "colwise"
        elif OUT.search(name) or DOWN.search(name):
            styles[name] = "rowwise"
    if not any(s == "rowwise" for s in styles.values()) or not any(s == "colwise" for s in styles.values()):
        return {}, msg("tp_no_projections", block=type(block).__name__)
    if (why := _heads_indivisible(block, tp)) is not None:
        return {}, why
    modules = dict(block.named_modules())
    head_dims = [v for m in modules.values() for a in HEAD_DIM_ATTRS if _count(v := getattr(m, a, None))]
    for name, style in styles.items():
        linear = modules[name]
        width = linear.out_features if style == "colwise" else linear.in_features
        if width % tp:
            return {}, msg("tp_features_indivisible", name=name, width=width, tp=tp)
        if QKV.search(name) and head_dims and (width // tp) % head_dims[0]:
            return {}, msg("tp_head_features_indivisible", name=name, width=width, head_dim=head_dims[0], tp=tp)
    return styles, None


def derive_plan(model: nn.Module, tp: int, workload: Any | None = None) -> TpPlan:
    """The plan for the whole model: the workload's own, else every repeated block's (module names from the root)."""
    if workload is not None and getattr(workload, "tensor_parallel_plan", None) is not None:
        styles = dict(workload.tensor_parallel_plan(model))
        bad = {k: v for k, v in styles.items() if v not in STYLES}
        if bad:
            return TpPlan(reason=msg("tp_unknown_styles", bad=bad, styles=list(STYLES)))
        return TpPlan(styles=styles, source="the workload's tensor_parallel_plan")
    blocks = find_repeated_blocks(model)
    if not blocks:
        return TpPlan(reason=msg("tp_no_repeated_blocks"))
    if (why := _heads_indivisible(model, tp)) is not None:
        return TpPlan(reason=why)
    names = {id(m): n for n, m in model.named_modules()}
    styles: dict[str, str] = {}
    for block in blocks:
        inner = unwrapped(block)
        own, reason = block_plan(inner, tp)
        if reason is not None:
            return TpPlan(reason=reason)
        prefix = names[id(inner)]
        styles.update({f"{prefix}.{name}": style for name, style in own.items()})
    return TpPlan(styles=styles, source=(f"derived: {len(blocks)} × {type(unwrapped(blocks[0])).__name__}, q/k/v and MLP "
                                         "up → ColwiseParallel, attention output and MLP down → RowwiseParallel"))


def model_on_meta(workload: Any) -> nn.Module:
    """The model's structure without its memory (the meta device), for reading its layout and re-deriving the plan;
    built for real where the model cannot be built on meta."""
    try:
        with torch.device("meta"):
            return workload.model()
    except Exception:  # noqa: BLE001 - some models cannot be built on meta
        return workload.model()


def _style(name: str) -> Any:
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, SequenceParallel

    return {"colwise": ColwiseParallel(), "rowwise": RowwiseParallel(), "sequence": SequenceParallel(),
            "colwise_dtensor": ColwiseParallel(use_local_output=False)}[name]


def apply_tensor_parallel(model: nn.Module, config: TrialConfig, workload: Any | None) -> Any:
    """parallelize_module with the plan, in place (the model must already be on its device); returns the mesh:
    ("tp",) alone, or ("dp", "tp") when FSDP2 shards across replicas (rank = dp index × tp + tp index: a TP group is
    adjacent ranks, on one node when tp divides the ranks per node)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import parallelize_module

    plan = derive_plan(model, config.tensor_parallel, workload)
    if plan.reason is not None:
        raise ValueError(f"tensor parallelism inapplicable: {words(plan.reason)}")
    tp, dp = config.tensor_parallel, config.data_parallel_size
    shape, names = ((tp,), ("tp",)) if dp == 1 else ((dp, tp), ("dp", "tp"))
    mesh = init_device_mesh(config.device, shape, mesh_dim_names=names)
    parallelize_module(model, mesh["tp"], {name: _style(style) for name, style in plan.styles.items()})
    return mesh
