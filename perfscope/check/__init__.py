"""The CI gate: did MFU (or samples/s, or step time) drop beyond a tolerance since the baseline?

    perfscope check perfscope-out/results.json --baseline perfscope-baseline.json --max-drop 5%

One concern per module: `metrics` (what can be gated, as per-step samples), `compat` (may these runs be
compared at all), `decision` (the statistical rule, documented there), `gate` (collect every verdict),
`history` (a stored baseline's sessions), `sessions` (the variance between days and hosts), `paired` (the A/B
decision of `perfscope ab`), `structure` (the exact diff of two structural fingerprints, `--fail-on-structure`),
`render` (table, Markdown, JUnit). Exit codes are the CLI's: 0 pass, 1 regression, 2 unusable input,
3 inconclusive, 4 not comparable (another kind of machine or software than the baseline's).
"""

from perfscope.check.compat import Difference
from perfscope.check.decision import MetricCheck, Verdict
from perfscope.check.gate import RECOMMENDED, GateOptions, GateReport, run_gate
from perfscope.check.metrics import METRICS

__all__ = ["METRICS", "RECOMMENDED", "Difference", "GateOptions", "GateReport", "MetricCheck", "Verdict", "run_gate"]
