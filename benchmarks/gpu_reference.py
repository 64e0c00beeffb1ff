"""Reference figures for the GPU acceptance (rows 4, 5, 6 and 10 of shared/gpu-acceptance.md), measured
independently of perfscope's trial loop, so perfscope's own figures can be checked against them.

    python benchmarks/gpu_reference.py [--json OUT.json]

Every figure: warm-up first, random inputs (never zeros), CUDA events around a window of steps (one
synchronize at the end), so a figure is the window's wall time on the device divided by its steps.
Rows:
  convnet   ResNet-50 (torchvision, else a ResNet-50-shaped stack), batch 64, 224²: fp32, bf16, bf16 + channels_last
  launch    48 × Linear(32, 32) + ReLU, batch 4: eager, torch.compile, torch.compile(mode="reduce-overhead")
  h2d       a 64×3×224×224 fp32 batch copied host→device from pageable vs pinned memory
  matmul    8192³ bf16 (and tf32, fp16) matmul TFLOP/s, and perfscope.measure.peaks' own figure
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def window_ms(fn, *, warmup: int, steps: int) -> float:
    """Mean ms per call over a window timed with CUDA events (one sync at the end)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(steps):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / steps


def _resnet50() -> nn.Module:
    try:
        import torchvision

        return torchvision.models.resnet50(num_classes=1000)
    except Exception:  # noqa: BLE001 - a ResNet-50-shaped stand-in
        layers = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
        c = 64
        for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
            for i in range(blocks):
                layers += [nn.Conv2d(c, width, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
                           nn.Conv2d(width, width, 3, stride if i == 0 else 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
                           nn.Conv2d(width, width * 4, 1, bias=False), nn.BatchNorm2d(width * 4), nn.ReLU()]
                c = width * 4
        return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, 1000))


def convnet_rows() -> dict[str, float]:
    out = {}
    for label, dtype, channels_last in (("fp32", None, False), ("bf16", torch.bfloat16, False), ("bf16_channels_last", torch.bfloat16, True)):
        torch.manual_seed(0)
        model = _resnet50().cuda()
        fmt = torch.channels_last if channels_last else torch.contiguous_format
        model = model.to(memory_format=fmt)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        x = torch.randn(64, 3, 224, 224, device="cuda").contiguous(memory_format=fmt)
        y = torch.randint(0, 1000, (64,), device="cuda")

        def step() -> None:
            with torch.autocast("cuda", dtype=dtype, enabled=dtype is not None):
                loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        out[label] = window_ms(step, warmup=5, steps=20)
        torch.cuda.empty_cache()
    return out


def launch_rows() -> dict[str, float]:
    out = {}
    for label, mode in (("eager", None), ("compile", "default"), ("compile_reduce_overhead", "reduce-overhead")):
        torch.manual_seed(0)
        model = nn.Sequential(*[m for _ in range(48) for m in (nn.Linear(32, 32), nn.ReLU())], nn.Linear(32, 10)).cuda()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        fwd = torch.compile(model, mode=mode) if mode else model
        x, y = torch.randn(4, 32, device="cuda"), torch.randint(0, 10, (4,), device="cuda")

        def step() -> None:
            if mode == "reduce-overhead":
                torch.compiler.cudagraph_mark_step_begin()
            loss = F.cross_entropy(fwd(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        out[label] = window_ms(step, warmup=10, steps=100)
    return out


def h2d_rows() -> dict[str, float]:
    pageable = torch.randn(64, 3, 224, 224)
    pinned = pageable.pin_memory()
    return {
        "pageable": window_ms(lambda: pageable.to("cuda", non_blocking=False), warmup=3, steps=20),
        "pinned": window_ms(lambda: pinned.to("cuda", non_blocking=True), warmup=3, steps=20),
    }


def matmul_rows() -> dict[str, float]:
    out = {}
    n = 8192
    for label, dtype, tf32 in (("bf16", torch.bfloat16, False), ("fp16", torch.float16, False), ("tf32", torch.float32, True), ("fp32", torch.float32, False)):
        torch.backends.cuda.matmul.allow_tf32 = tf32
        a, b = torch.randn(n, n, device="cuda", dtype=dtype), torch.randn(n, n, device="cuda", dtype=dtype)
        ms = window_ms(lambda: torch.mm(a, b), warmup=3, steps=10 if label != "fp32" else 3)
        out[f"{label}_tflops"] = 2 * n**3 / (ms / 1e3) / 1e12
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        from perfscope.measure.peaks import measure_matmul_tflops

        out["perfscope_bf16_tflops"] = measure_matmul_tflops("cuda", "bf16")
    except Exception as exc:  # noqa: BLE001 - the acceptance records what perfscope's own probe does
        out["perfscope_bf16_error"] = f"{type(exc).__name__}: {exc}"
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--rows", default="matmul,h2d,convnet,launch")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("gpu_reference needs a CUDA GPU")
        return 2
    report: dict[str, object] = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__}
    rows = {"convnet": convnet_rows, "launch": launch_rows, "h2d": h2d_rows, "matmul": matmul_rows}
    for name in args.rows.split(","):
        t0 = time.monotonic()
        try:
            report[name] = rows[name]()
        except Exception as exc:  # noqa: BLE001 - one row failing must not hide the others
            report[name] = {"error": f"{type(exc).__name__}: {exc}"}
        print(f"{name} ({time.monotonic() - t0:.0f}s): {json.dumps(report[name])}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
