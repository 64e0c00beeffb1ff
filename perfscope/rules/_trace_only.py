"""Findings from a trace the user brought (Results.source "trace"): nothing was measured, each one says so.

A rule reads the same typed facts whether `analyze` ran the workload or `perfscope trace` read a trace, so the
label is added here, once, rather than in every rule: no knob was tried and no gain measured, so a finding from
a trace is a diagnosis, and its estimate (where it has one) an estimate from the trace alone.
"""

from __future__ import annotations

from perfscope.results import Finding

TRACE_ESTIMATE = "nothing was measured: this is an estimate from the trace (no rerun)"


def label_trace_estimates(findings: list[Finding]) -> list[Finding]:
    """Every finding that carries no measured gain, labelled as an estimate from the trace (evidence first line)."""
    for f in findings:
        if f.gain is None and TRACE_ESTIMATE not in f.evidence:
            f.evidence.insert(0, TRACE_ESTIMATE)
            if f.estimate_method:
                f.estimate_method = f"{f.estimate_method} (from the trace alone: nothing was measured)"
    return findings
