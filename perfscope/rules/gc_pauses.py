from __future__ import annotations

from perfscope.results import Finding
from perfscope.rules._text import ms, pct
from perfscope.rules.engine import Rule, RuleContext, RuleDoc, up_to


class GcPauses(Rule):
    """Step times have a long tail and the garbage collector's measured pauses explain it.

    Anti-pattern: a full garbage collection walks every tracked object — with large Python-side state it
    can take tens of milliseconds in a random step. Best practice: `gc.freeze()` after start-up (or
    `gc.disable()` and collect every N steps), and avoid creating many Python objects per step.
    A tail alone names no cause (a data-bound loop's slow steps are waits on the loader): the trial times every
    collection in the window and attributes it to its step, and the rule fires only where those pauses make up
    ``explains`` of the tail steps' time above the median, or where the gc_freeze knob measured a win.
    """

    id = "PS602"
    name = "gc-pauses"
    doc = RuleDoc(
        detects="long step-time tail the collector's pauses explain",
        threshold="slowest step ≥ 2× the median, or p90 / median ≥ 1.3, and the collections timed in the window (attributed "
                  "to their steps) make up ≥ 50% of the tail steps' time above the median",
        evidence="step-time percentiles, the collections and their pauses",
        fix="`gc.freeze()` after warm-up",
        gain="measured (`gc_freeze`); else estimated (upper bound): the window without the measured pauses; bound: those "
             "pauses",
        guard='a tail without collector pauses in it (a loader\'s waits, a neighbour) names no cause: no finding; measured no '
              'better → "did not help here"',
    )
    groups = ("host",)
    knobs = ("gc_freeze",)
    addresses = ("host", "launch")
    spread: float = 2.0
    """A tail: the slowest step is at least this many times the median ..."""
    tail: float = 1.3
    """... or p90 / median reaches this."""
    explains: float = 0.5
    """The share of the tail steps' excess over the median that measured collector pauses must account for."""

    def check(self, ctx: RuleContext) -> list[Finding]:
        m, st = ctx.metrics, ctx.metrics.typical_step
        if st is None:
            return []
        won = ctx.won("gc_freeze") is not None
        has_tail = st.max >= self.spread * st.median or st.p90 >= self.tail * st.median
        pauses = m.step_gc_pause_s if len(m.step_gc_pause_s) == len(m.step_times_s) else []
        tail = [(t - st.median, p) for t, p in zip(m.step_times_s, pauses) if t >= st.p90 and t > st.median]
        excess = sum(e for e, _ in tail)
        explained = min(sum(p for _, p in tail), excess) / excess if excess > 0 else 0.0
        if not won and (not has_tail or not m.gc_pause_s or explained < self.explains):
            return []  # no tail, or a tail the collector's measured pauses do not explain: not the collector's case
        evidence = [f"median step {ms(st.median)}, p90 {ms(st.p90)}, slowest {ms(st.max)}"]
        if m.gc_pause_s:
            evidence.append(f"{m.gc_collections} garbage collection(s) paused the window {ms(m.gc_pause_s)} "
                            f"({pct(m.gc_pause_s / m.wall_s) if m.wall_s else '?'} of it); they make up {pct(explained)} of "
                            "the slowest steps' time above the median")
        finding = Finding(
            rule_id=self.id, title="Long-tail steps: freeze the garbage collector", severity="low", evidence=evidence,
            fix="+import gc\n+gc.collect(); gc.freeze()   # after the model, optimizer and loader are built",
            reference="https://docs.python.org/3/library/gc.html#gc.freeze",
        )
        if m.gc_pause_s and m.wall_s:
            up_to(finding, m.gc_pause_s / m.wall_s, "the window without the collector's measured pauses (window / "
                  "(window − pauses)); gc.freeze() spares only the objects alive when it is called",
                  f"the collector's measured pauses: {ms(m.gc_pause_s)} of a {ms(m.wall_s)} window; freezing cannot win more than them")
        return [self.measured(ctx, finding, "gc_freeze")]
