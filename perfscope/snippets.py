"""The code changes perfscope shows (knobs' `code_change`, rules' `fix`), written for the run's device.

Design notes: docs/internals.md."""

from __future__ import annotations

from perfscope.tf32_api import Tf32Api


def model_expr(device: str) -> str:
    """How the example model is built and placed on ``device`` in the snippets."""
    if device == "cpu":
        return "MyNet()"
    if device == "cuda":
        return "MyNet().cuda()"
    return f'MyNet().to("{device}")'


def compile_change(device: str, mode: str | None = None) -> str:
    model = model_expr(device)
    extra = f', mode="{mode}"' if mode else ""
    return f"-model = {model}\n+model = torch.compile({model}{extra})"


def autocast_change(device: str, dtype: str = "bfloat16") -> str:
    return (
        "-    loss = loss_fn(model, batch)\n"
        f'+    with torch.autocast(device_type="{device}", dtype=torch.{dtype}):\n'
        "+        loss = loss_fn(model, batch)\n"
        "     loss.backward()"
    )


def fp16_scaler_change(device: str) -> str:
    return (
        f'+scaler = torch.amp.GradScaler("{device}")\n'
        "-    loss = loss_fn(model, batch)\n"
        "-    loss.backward()\n"
        "-    optimizer.step()\n"
        f'+    with torch.autocast(device_type="{device}", dtype=torch.float16):\n'
        "+        loss = loss_fn(model, batch)\n"
        "+    scaler.scale(loss).backward()\n"
        "+    scaler.step(optimizer)\n"
        "+    scaler.update()"
    )


def fp16_to_bf16_change(device: str) -> str:
    return (
        f'-with torch.autocast(device_type="{device}", dtype=torch.float16):\n'
        f'+with torch.autocast(device_type="{device}", dtype=torch.bfloat16):   # or keep fp16 with torch.amp.GradScaler'
    )


def channels_last_change(device: str) -> str:
    model = model_expr(device)
    move = "" if device == "cpu" else (".cuda()" if device == "cuda" else f'.to("{device}")')
    return (
        f"-model = {model}\n"
        f"+model = {model}.to(memory_format=torch.channels_last)\n"
        f"-x = x{move}\n"
        f"+x = x{move}.contiguous(memory_format=torch.channels_last)"
    )


def pin_memory_change(device: str) -> str:
    return (
        "-loader = DataLoader(ds, batch_size=B)\n"
        "+loader = DataLoader(ds, batch_size=B, pin_memory=True)\n"
        f'-x = x.to("{device}")\n'
        f'+x = x.to("{device}", non_blocking=True)'
    )


def tf32_change(api: Tf32Api) -> str:
    """The line that turns matmul TF32 on, through the setter perfscope.tf32_api picked for the run's torch."""
    if api.setter == "fp32_precision":
        return '+torch.backends.cuda.matmul.fp32_precision = "tf32"'
    line = "+torch.backends.cuda.matmul.allow_tf32 = True"
    if api.has_new_api:  # a torch >= 2.9 user would otherwise reach for the new setter, which breaks compile
        line += '   # also sets fp32_precision = "tf32"; that setter alone makes torch.compile raise (pytorch#166387)'
    return line


def checkpoint_change() -> str:
    return (
        "+from torch.utils.checkpoint import checkpoint\n"
        "     for block in self.blocks:\n"
        "-        x = block(x)\n"
        "+        x = checkpoint(block, x, use_reentrant=False)"
    )


def lean_optimizer_change() -> str:
    return ("-optimizer = torch.optim.AdamW(model.parameters(), lr=lr)\n"
            "+optimizer = torchao.optim.AdamW8bit(model.parameters(), lr=lr)   # or bnb.optim.AdamW8bit, FSDP / ZeroRedundancyOptimizer")


def sharding_change(stage: int) -> str:
    """ZeRO-``stage`` over the data-parallel ranks: ZeroRedundancyOptimizer (1), FSDP2 `fully_shard` (2, 3)."""
    if stage <= 1:
        return ("-optimizer = torch.optim.AdamW(model.parameters(), lr=lr)\n"
                "+from torch.distributed.optim import ZeroRedundancyOptimizer\n"
                "+optimizer = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW, lr=lr)   # ZeRO-1: state sharded")
    reshard = "True" if stage >= 3 else "False"
    what = ("ZeRO-3: parameters, gradients and state sharded" if stage >= 3
            else "ZeRO-2: gradients and state sharded, parameters kept after forward")
    return ("-model = DistributedDataParallel(model)\n"
            "+from torch.distributed.fsdp import fully_shard\n"
            "+for block in model.blocks:   # the repeated blocks, then the root\n"
            f"+    fully_shard(block, reshard_after_forward={reshard})\n"
            f"+fully_shard(model, reshard_after_forward={reshard})   # {what}")


# ----------------------------------------------------------------------- data parallel (a torchrun loop)


def backend(device: str) -> str:
    """The process group's backend for the run's device: NCCL between GPUs, gloo between CPU processes."""
    return "nccl" if device == "cuda" else "gloo"


def ddp_wrap(device: str, **options: object) -> str:
    """The DDP constructor line of the snippets ("model = DistributedDataParallel(model, device_ids=[local_rank])"
    on a GPU: each rank drives the GPU of its local rank)."""
    args = ["model"] + (["device_ids=[local_rank]"] if device == "cuda" else []) + [f"{k}={v}" for k, v in options.items()]
    return f"model = DistributedDataParallel({', '.join(args)})"


def ddp_option_change(device: str, comment: str, **options: object) -> str:
    """One more DistributedDataParallel argument, with why."""
    return f"-{ddp_wrap(device)}\n+{ddp_wrap(device, **options)}   # {comment}"


def ddp_setup(device: str) -> str:
    """The context lines of a torchrun loop up to its DDP wrapper (diff context: no +/-)."""
    model = model_expr(device)
    place = ["torch.cuda.set_device(local_rank)"] if device == "cuda" else []
    return "\n".join(f" {line}" for line in [f'dist.init_process_group("{backend(device)}")', *place, f"model = {model}"])
