from __future__ import annotations

from perfscope.results import Finding
from perfscope.rules.engine import Rule, RuleContext, RuleDoc

# NVML clock-event reasons that mean the GPU was slowed against its will (heat, a hardware signal, the power
# brake). "SW power cap" is not among them: a loaded H100 sits at its power limit routinely and the driver trims
# clocks a little to stay there — information, unless the clocks end up far below the maximum.
SLOWDOWN_REASONS = ("HW slowdown", "HW thermal slowdown", "HW power brake", "SW thermal slowdown")
POWER_CAP = "SW power cap"


class Throttling(Rule):
    """The GPU throttled its clocks (temperature, a hardware slowdown or the power brake) during the measured steps.

    Anti-pattern: a hot GPU, or one whose board signals a hardware slowdown, runs below its boost clock, and every
    figure on it is lower than the same code elsewhere. Reaching the software power cap is routine under load
    and only matters when it pulls the clocks far below their maximum. Best practice: check cooling and power
    limits (`nvidia-smi -q -d PERFORMANCE`), and compare runs only on machines in the same state.
    """

    id = "PS702"
    name = "throttling"
    doc = RuleDoc(
        detects="GPU clock throttling",
        threshold="clocks < 85 % of max, or thermal/power brake",
        evidence="NVML reasons and clocks",
        fix="cooling / power settings",
        gain="not quantified",
        guard="SW power cap is information unless clocks fall far",
    )
    groups = ("hardware",)
    addresses = ("gemm", "conv", "attention", "elementwise", "normalization", "optimizer", "other", "compute")
    clock_drop: float = 0.85
    """Fire when the SM clock's p10 falls below this share of its p90 (with no NVML reason, or a slowdown reason)."""
    power_cap_clock_share: float = 0.75
    """With only the SW power cap engaged, fire when the median SM clock is below this share of the maximum."""

    def check(self, ctx: RuleContext) -> list[Finding]:
        util = ctx.metrics.utilization
        if util is None:
            return []
        seen = list(util.throttle_reasons_seen)
        slowdowns = [r for r in seen if r in SLOWDOWN_REASONS]
        power_capped = POWER_CAP in seen
        clocks = util.sm_clock_mhz
        dropped = clocks is not None and clocks.p90 > 0 and clocks.p10 < self.clock_drop * clocks.p90
        max_clock = util.sm_clock_max_mhz or (clocks.max if clocks is not None else None)
        far_below = clocks is not None and bool(max_clock) and clocks.median < self.power_cap_clock_share * max_clock  # type: ignore[operator]
        evidence = [f"NVML clock-event reasons: {', '.join(seen)}"] if seen else []
        if clocks is not None:
            top = f", max {util.sm_clock_max_mhz:.0f} MHz (device)" if util.sm_clock_max_mhz else ""
            evidence.append(f"SM clock p10 {clocks.p10:.0f} MHz, median {clocks.median:.0f} MHz, p90 {clocks.p90:.0f} MHz{top}")
        fix = "+# check: nvidia-smi -q -d PERFORMANCE,POWER,TEMPERATURE   (cooling, power limit, application clocks)"
        reference = "https://docs.nvidia.com/deploy/nvml-api/group__nvmlClocksEventReasons.html"
        if slowdowns or (power_capped and far_below) or (dropped and not power_capped):
            return [Finding(rule_id=self.id, title="GPU clocks throttled", severity="medium", evidence=evidence, fix=fix, reference=reference)]
        if power_capped:
            return [Finding(
                rule_id=self.id, title="GPU at its software power cap (routine under load, clocks near their maximum)",
                severity="info", evidence=evidence, fix=fix, reference=reference,
            )]
        return []
