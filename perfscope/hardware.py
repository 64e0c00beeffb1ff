"""What the hardware does on paper: datasheet dense FLOP/s per device (and a MIG slice's share), and the bus-bandwidth
convention of NCCL-tests. Pure and torch-free, below both layers that read figures against them.

Design notes: docs/internals.md."""

from __future__ import annotations

import re
from dataclasses import dataclass

from perfscope.results.messages import Message, msg

HOPPER_SMS = ("NVIDIA H100 Tensor Core GPU Architecture whitepaper (https://resources.nvidia.com/en-us-tensor-core/"
              "gtc22-whitepaper-hopper): H100 SXM5 132 SMs, H100 PCIe 114 SMs; H100 NVL and H200 are the same GH100 "
              "configuration as the SXM5 (16,896 FP32 cores = 132 SMs)")
AMPERE_SMS = ("NVIDIA A100 Tensor Core GPU Architecture whitepaper (https://images.nvidia.com/aem-dam/en-zz/Solutions/"
              "data-center/nvidia-ampere-architecture-whitepaper.pdf): A100 108 SMs")

V100_DATASHEET = "https://images.nvidia.com/content/technologies/volta/pdf/volta-v100-datasheet-update-us-1165301-r5.pdf"
# The PCIe H200 NVL runs the H100 NVL's lower clocks/power (600 W): the same figures (FP32 60, TF32 835, BF16/FP16
# 1,671, FP8 3,341 TFLOPS with sparsity); the H200 SXM those of the H100 SXM.
HOPPER_NVL = {"fp32": 60.0, "tf32": 417.5, "bf16": 835.5, "fp16": 835.5, "fp8": 1670.5}
HOPPER_SXM = {"fp32": 66.9, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4, "fp8": 1978.9}


@dataclass(frozen=True)
class DevicePeak:
    name: str
    tflops: dict[str, float]  # dtype -> dense TFLOP/s (tensor cores where the dtype uses them)
    source: str
    sm_count: int | None = None
    """SMs of the full GPU the datasheet describes: a MIG slice's peak is scaled by its share of them."""
    sm_source: str = ""


# Ordered: the first pattern that matches the lower-cased device name wins (more specific first).
_DATASHEETS: list[tuple[str, DevicePeak]] = [
    (r"h100.*(nvl)", DevicePeak(
        "NVIDIA H100 NVL", HOPPER_NVL,
        "https://www.nvidia.com/en-us/data-center/h100/ (H100 NVL column, sparse figures halved)", 132, HOPPER_SMS)),
    (r"h100.*(pcie)", DevicePeak(
        "NVIDIA H100 PCIe", {"fp32": 51.2, "tf32": 378.0, "bf16": 756.0, "fp16": 756.0, "fp8": 1513.0},
        "https://www.nvidia.com/en-us/data-center/h100/ (H100 PCIe column, sparse figures halved)", 114, HOPPER_SMS)),
    (r"h100|gh200", DevicePeak(
        "NVIDIA H100 SXM", HOPPER_SXM,
        "https://www.nvidia.com/en-us/data-center/h100/ (H100 SXM column, sparse figures halved)", 132, HOPPER_SMS)),
    (r"h200.*nvl", DevicePeak(
        "NVIDIA H200 NVL", HOPPER_NVL,
        "https://www.nvidia.com/en-us/data-center/h200/ (H200 NVL column, sparse figures halved)", 132, HOPPER_SMS)),
    (r"h200", DevicePeak(
        "NVIDIA H200", HOPPER_SXM,
        "https://www.nvidia.com/en-us/data-center/h200/ (H200 SXM column, sparse figures halved)", 132, HOPPER_SMS)),
    (r"a100", DevicePeak(
        "NVIDIA A100", {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0},
        "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf",
        108, AMPERE_SMS)),
    (r"l40s", DevicePeak(
        "NVIDIA L40S", {"fp32": 91.6, "tf32": 183.0, "bf16": 362.05, "fp16": 362.05, "fp8": 733.0},
        "https://www.nvidia.com/en-us/data-center/l40s/ (sparse figures halved)")),
    (r"\bl4\b", DevicePeak(
        "NVIDIA L4", {"fp32": 30.3, "tf32": 60.0, "bf16": 121.0, "fp16": 121.0, "fp8": 242.5},
        "https://www.nvidia.com/en-us/data-center/l4/ (sparse figures halved)")),
    (r"\ba10\b|a10g", DevicePeak(
        "NVIDIA A10", {"fp32": 31.2, "tf32": 62.5, "bf16": 125.0, "fp16": 125.0},
        "https://www.nvidia.com/en-us/data-center/products/a10-gpu/ (sparse figures halved)")),
    # Volta: one datasheet, one column per form factor (no sparsity on Volta: the figures are dense). CUDA names
    # them "Tesla V100-SXM2-16GB", "Tesla V100-PCIE-32GB", "Tesla V100S-PCIE-32GB"; V100S first ("v100s-pcie"
    # would match the V100 PCIe pattern too). Other V100 parts (FHHL, SXM3, DGXS) run other clocks: no guessed peak.
    (r"v100s", DevicePeak(
        "NVIDIA V100S PCIe", {"fp32": 16.4, "fp16": 130.0}, f"{V100_DATASHEET} (V100S PCIe column)")),
    (r"v100.*pcie", DevicePeak(
        "NVIDIA V100 PCIe", {"fp32": 14.0, "fp16": 112.0}, f"{V100_DATASHEET} (V100 PCIe column)")),
    (r"v100.*sxm2", DevicePeak(
        "NVIDIA V100", {"fp32": 15.7, "fp16": 125.0}, f"{V100_DATASHEET} (V100 SXM2 column)")),
    (r"rtx 4090", DevicePeak(
        "NVIDIA GeForce RTX 4090", {"fp32": 82.6, "tf32": 82.6, "bf16": 165.2, "fp16": 165.2},
        "https://images.nvidia.com/aem-dam/Solutions/geforce/ada/nvidia-ada-gpu-architecture.pdf (FP32 accumulate, dense)")),
    (r"rtx 3090", DevicePeak(
        "NVIDIA GeForce RTX 3090", {"fp32": 35.6, "tf32": 35.6, "bf16": 71.0, "fp16": 71.0},
        "https://www.nvidia.com/content/PDF/nvidia-ampere-ga-102-gpu-architecture-whitepaper-v2.pdf (FP32 accumulate, dense)")),
    (r"rtx a6000", DevicePeak(
        "NVIDIA RTX A6000", {"fp32": 38.7, "tf32": 77.4, "bf16": 154.8, "fp16": 154.8},
        "https://www.nvidia.com/content/PDF/nvidia-ampere-ga-102-gpu-architecture-whitepaper-v2.pdf (dense)")),
]


def datasheet_peak(device_name: str) -> DevicePeak | None:
    """The datasheet entry for a device name as CUDA reports it, or None when the device is unknown."""
    lowered = device_name.lower()
    for pattern, peak in _DATASHEETS:
        if re.search(pattern, lowered):
            return peak
    return None


def is_mig_name(device_name: str) -> bool:
    """CUDA names a MIG compute instance after its profile, e.g. "NVIDIA A100-SXM4-40GB MIG 3g.20gb"."""
    return re.search(r"\bMIG\b", device_name) is not None


def slice_peak(peak: DevicePeak, device_sms: int | None, *, mig: bool) -> tuple[DevicePeak | None, Message | None]:
    """The datasheet peak of the part of the GPU this process can use: (peak, None), or (None, why not)."""
    fewer_sms = device_sms is not None and peak.sm_count is not None and device_sms < peak.sm_count
    if not (mig or fewer_sms):
        return peak, None
    what = "a MIG slice" if mig else f"{device_sms} SMs"
    if not device_sms or not peak.sm_count:
        return None, msg("slice_share_unknown", what=what, gpu=peak.name)
    share = device_sms / peak.sm_count
    return DevicePeak(name=f"{peak.name}, {what} ({device_sms}/{peak.sm_count} SMs)", sm_count=device_sms,
                      tflops={k: round(v * share, 2) for k, v in peak.tflops.items()},
                      source=f"{peak.source}; scaled by the SM share {device_sms}/{peak.sm_count} (full-GPU SMs: {peak.sm_source})",
                      sm_source=f"CUDA multi_processor_count of this device; full GPU: {peak.sm_source}"), None


# ---- bus bandwidth: the convention of NCCL-tests, one formula for a collective measured alone and one in a trace -----

BUS_FACTOR = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
}
"""Bus bandwidth / algorithm bandwidth (bytes / time), as NCCL-tests defines it: what each rank's link carries,
so that figures compare across world sizes and against the link's speed."""


def bus_bandwidth_gbps(op: str, nbytes: float, seconds: float, world_size: int) -> float | None:
    """Bus bandwidth in GB/s (10⁹ bytes/s) of ``nbytes`` moved by ``op`` in ``seconds`` on ``world_size`` ranks;
    None when the op has no convention (send/recv), nothing was timed, or a world of one used no link."""
    factor = BUS_FACTOR.get(op)
    if factor is None or seconds <= 0 or nbytes <= 0 or world_size < 2:
        return None
    return nbytes / seconds * factor(world_size) / 1e9
