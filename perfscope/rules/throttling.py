from __future__ import annotations

from dataclasses import dataclass

from perfscope.results import Finding
from perfscope.rules.engine import Rule, RuleContext


@dataclass
class Throttling(Rule):
    """The GPU throttled its clocks (power cap or temperature) during the measured steps.

    Anti-pattern: a power-capped or hot GPU runs below its boost clock, and every figure on it is lower
    than the same code elsewhere. Best practice: check cooling and power limits (`nvidia-smi -q -d PERFORMANCE`),
    and compare runs only on machines in the same state.
    """

    id = "PS702"
    name = "throttling"
    groups = ("hardware",)
    clock_drop: float = 0.85
    """Also fire when the SM clock's p10 falls below this share of its p90."""

    def check(self, ctx: RuleContext) -> list[Finding]:
        util = ctx.metrics.utilization
        if util is None:
            return []
        reasons = [r for r in util.throttle_reasons_seen if "power" in r.lower() or "thermal" in r.lower() or "slowdown" in r.lower()]
        clocks = util.sm_clock_mhz
        dropped = clocks is not None and clocks.p90 > 0 and clocks.p10 < self.clock_drop * clocks.p90
        if not reasons and not dropped:
            return []
        evidence = [f"NVML throttle reasons: {', '.join(reasons)}"] if reasons else []
        if clocks is not None:
            evidence.append(f"SM clock p10 {clocks.p10:.0f} MHz, median {clocks.median:.0f} MHz, p90 {clocks.p90:.0f} MHz")
        return [Finding(
            rule_id=self.id, title="GPU clocks throttled", severity="medium", evidence=evidence,
            fix="+# check: nvidia-smi -q -d PERFORMANCE,POWER,TEMPERATURE   (cooling, power limit, application clocks)",
            reference="https://docs.nvidia.com/deploy/nvml-api/group__nvmlClocksEventReasons.html",
        )]
