"""The CI gate: did MFU (or samples/s, or step time) drop beyond a tolerance since the baseline?

    perfscope check perfscope-out/results.json --baseline perfscope-baseline.json --max-drop 5%

Design notes: docs/ci-gate.md.
"""

from perfscope.check.compat import Difference
from perfscope.check.decision import MetricCheck, Verdict
from perfscope.check.gate import RECOMMENDED, GateOptions, GateReport, run_gate
from perfscope.check.metrics import METRICS

__all__ = ["METRICS", "RECOMMENDED", "Difference", "GateOptions", "GateReport", "MetricCheck", "Verdict", "run_gate"]
