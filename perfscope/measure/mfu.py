"""MFU and HFU: achieved model (hardware) FLOP/s over one fixed peak. Design notes: docs/measurement.md."""

from __future__ import annotations

from perfscope.results import Environment, Peak, TrialMetrics
from perfscope.results.job import flop_utilization
from perfscope.results.messages import Message, msg
from perfscope.wording import words


def choose_peak(env: Environment, override_tflops: float | None = None) -> Peak | None:
    """The ranking denominator: --peak-tflops, else the datasheet's best dense dtype, else the measured ceiling."""
    if override_tflops is not None:
        return Peak(tflops=override_tflops, dtype="user", source="--peak-tflops (user supplied)")
    if env.datasheet_peaks_tflops:
        candidates = {k: v for k, v in env.datasheet_peaks_tflops.items() if k in ("fp32", "tf32", "bf16", "fp16")}
        dtype = max(candidates, key=candidates.__getitem__)
        return Peak(tflops=candidates[dtype], dtype=dtype, source=f"datasheet, dense: {env.datasheet_source}")
    if env.measured_ceiling_tflops:
        dtype = max(env.measured_ceiling_tflops, key=env.measured_ceiling_tflops.__getitem__)
        # Why there is no datasheet peak: unknown device, or a MIG slice whose SM share is unknown.
        reason = env.unavailable.get("datasheet_peaks_tflops")
        why = "CPU" if env.device_type == "cpu" else (words(reason) if reason else f"no datasheet entry for {env.device_name}")
        return Peak(
            tflops=env.measured_ceiling_tflops[dtype],
            dtype=dtype,
            source=f"measured matmul ceiling ({why}{'; ' + env.measured_ceiling_how if env.measured_ceiling_how else ''}); "
                   "MFU here is relative to what this machine's matmul reaches",
        )
    return None


def apply_utilization_ratios(metrics: TrialMetrics, peak: Peak | None, env: Environment, *,
                             steps_per_s: float | None = None) -> None:
    """Fill achieved_tflops, mfu, hfu and mfu_vs_measured_ceiling from work / wall time of the windows
    (``steps_per_s``: one device's, when not this process's steps / wall: a data-parallel job's). A ratio above 1
    cannot be true as measured (a wrong FLOP count or peak, a ceiling measured on a busy machine): not reported."""
    if not metrics.flops_per_step:
        metrics.unavailable.setdefault("mfu", metrics.unavailable.get("flops_per_step", msg("no_flop_count")))
        return
    if metrics.wall_s <= 0 or metrics.steps <= 0:
        metrics.unavailable["mfu"] = msg("no_timed_step")
        return
    rate = steps_per_s if steps_per_s is not None else metrics.steps / metrics.wall_s
    flops = metrics.flops_per_step
    metrics.achieved_tflops = flop_utilization(flops, rate, 1.0)  # FLOP/s over 1 TFLOP/s: TFLOP/s
    if peak is None:
        metrics.unavailable["mfu"] = msg("no_peak")
    else:
        metrics.mfu = _plausible(metrics, "mfu", flop_utilization(flops, rate, peak.tflops),
                                 msg("against_peak", tflops=peak.tflops, source=peak.source))
        if metrics.hardware_flops_per_step:
            metrics.hfu = _plausible(metrics, "hfu", flop_utilization(metrics.hardware_flops_per_step, rate, peak.tflops),
                                     msg("against_peak", tflops=peak.tflops))
    if env.measured_ceiling_tflops:
        ceiling = max(env.measured_ceiling_tflops.values())
        metrics.mfu_vs_measured_ceiling = _plausible(
            metrics, "mfu_vs_measured_ceiling", flop_utilization(flops, rate, ceiling),
            msg("against_ceiling", tflops=ceiling),
        )
    else:
        metrics.unavailable["mfu_vs_measured_ceiling"] = msg("no_measured_ceiling")


def _plausible(metrics: TrialMetrics, name: str, value: float, against: Message) -> float | None:
    if value <= 1.0:
        return value
    why = msg("implausible_ratio", name=name, value=value, against=against, flops=metrics.flops_per_step)
    metrics.unavailable[name] = why
    metrics.flags.append(why)
    return None
