from __future__ import annotations

from dataclasses import dataclass

from perfscope.results import Finding
from perfscope.rules._text import ms
from perfscope.rules.engine import Rule, RuleContext


@dataclass
class GcPauses(Rule):
    """Step times have a long tail: Python GC pauses (or other host hiccups) hit random steps.

    Anti-pattern: a full garbage collection walks every tracked object — with large Python-side state it
    can take tens of milliseconds in a random step. Best practice: `gc.freeze()` after start-up (or
    `gc.disable()` and collect every N steps), and avoid creating many Python objects per step.
    """

    id = "PS602"
    name = "gc-pauses"
    groups = ("host",)
    knobs = ("gc_freeze",)
    addresses = ("host", "launch")
    spread: float = 2.0
    """Fire when the slowest step is at least this many times the median ..."""
    tail: float = 1.3
    """... or p90 / median reaches this, or the gc_freeze knob measured a significant win."""

    def check(self, ctx: RuleContext) -> list[Finding]:
        st = ctx.metrics.typical_step
        if st is None:
            return []
        outcome = ctx.knob("gc_freeze")
        won = outcome is not None and outcome.gain is not None and outcome.gain.faster
        if not won and st.max < self.spread * st.median and st.p90 < self.tail * st.median:
            return []
        if not won and ctx.results.source == "trace":
            return []  # a trace records no collector pause: a slow step there is evidence of a tail, not of its cause
        if not won and self._tail_is_data(ctx, st.p90):
            return []  # the slow steps waited for data: the data-loader rule's case, not the collector's
        finding = Finding(
            rule_id=self.id, title="Long-tail steps: freeze the garbage collector", severity="low",
            evidence=[f"median step {ms(st.median)}, p90 {ms(st.p90)}, slowest {ms(st.max)}"],
            fix="+import gc\n+gc.collect(); gc.freeze()   # after the model, optimizer and loader are built",
            reference="https://docs.python.org/3/library/gc.html#gc.freeze",
        )
        times = ctx.metrics.step_times_s
        if times and st.median > 0:
            clipped = sum(min(t, st.median) for t in times)
            gain = sum(times) / clipped if clipped > 0 else 1.0
            if gain > 1.0:
                finding.estimated_gain = gain
                finding.estimate_method = ("upper bound: every step slower than the median runs at the median (sum of the steps / "
                                           "sum of the steps clipped at the median); assumes the whole tail is collector pauses — "
                                           "gc.freeze() only spares the objects alive when it is called")
                finding.estimate_bound = (f"the typical step: {ms(st.median)} (median of {len(times)} timed steps); freezing the "
                                          "collector shortens only the steps above it")
        return [self.measured(ctx, finding, "gc_freeze")]

    @staticmethod
    def _tail_is_data(ctx: RuleContext, p90: float) -> bool:
        """Half or more of the tail steps' time is exposed data wait."""
        m = ctx.metrics
        tail = [(t, w) for t, w in zip(m.step_times_s, m.step_data_wait_s) if t >= p90]
        total = sum(t for t, _ in tail)
        return total > 0 and sum(w for _, w in tail) / total >= 0.5
