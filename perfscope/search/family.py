"""Family-wise error control for the sweep's verdicts: Holm across candidates, a Bonferroni split across looks.

Design notes: docs/sweep.md."""

from __future__ import annotations

from dataclasses import dataclass, field

from perfscope.results.model import Gain
from perfscope.search.compare import MIN_DECIDING_RUNS, PairedTest
from perfscope.stats import t_quantile

FAMILY_ALPHA = 0.05
"""The sweep's family-wise error rate: P(any no-effect candidate called faster or slower)."""


@dataclass
class Family:
    """The looks at every candidate of one sweep, and their family-wise verdicts."""

    alpha: float = FAMILY_ALPHA
    max_runs: int = 4
    reference: str = "baseline"
    looks: dict[str, dict[int, PairedTest]] = field(default_factory=dict)
    """Candidate name -> runs -> its latest test with that many runs (a re-judged look replaces its older one)."""

    def weight(self, runs: int) -> float:
        """w_k: the share of a candidate's alpha spent at its look after ``runs`` runs (module docstring)."""
        first = MIN_DECIDING_RUNS
        if self.max_runs <= first:
            return 1.0
        return 0.5 if runs >= self.max_runs else 0.5 / (self.max_runs - first)

    def record(self, name: str, test: PairedTest | None) -> None:
        """A look at ``name``; a candidate without a usable run is still a member of the family."""
        looks = self.looks.setdefault(name, {})
        if test is not None:
            looks[test.runs] = test

    def futile(self, name: str) -> bool:
        """Futility stop (as in sequential trials): with the estimate held one standard error above where it is, would the last look
        (max_runs runs: the standard error shrunk by √(k/max_runs), the k − 1 degrees of freedom grown alike, the most
        stringent Holm level) still not decide? Then the remaining runs most likely end "cannot tell" too, and
        they cost as much as runs that find something: the sweep spends them elsewhere. Stopping early only
        ever removes chances to reject, so it cannot raise the family's error rate."""
        looks = self.looks.get(name) or {}
        if not looks or max(looks) < MIN_DECIDING_RUNS or max(looks) >= self.max_runs:
            return False
        test = looks[max(looks)]
        if not test.decidable or test.se == 0:
            return False
        grow = self.max_runs / test.runs
        level = self.alpha / max(1, len(self.looks)) * self.weight(self.max_runs)
        optimistic = abs(test.mean) + test.se  # one standard error kinder than the estimate: stop only the hopeless
        return optimistic / (test.se / grow ** 0.5) < t_quantile(1 - level / 2, (test.df + 1) * grow - 1)

    def adjusted_p(self, name: str) -> float:
        """p* = min over the candidate's looks of p_k / w_k (weighted Bonferroni across looks), capped at 1."""
        return min(1.0, min((t.p / self.weight(t.runs) for t in self.looks[name].values()), default=1.0))

    def decide(self) -> dict[str, Gain | None]:
        """Each candidate's Gain under Holm's step-down (module docstring); None for one without a usable run."""
        m = len(self.looks)
        order = sorted(self.looks, key=self.adjusted_p)
        stop_level = self.alpha
        rejected: dict[str, float] = {}
        for j, name in enumerate(order):
            level = self.alpha / (m - j)
            if self.adjusted_p(name) > level:
                stop_level = level
                break
            rejected[name] = level
        out: dict[str, Gain | None] = {}
        for name, looks in self.looks.items():
            if not looks:
                out[name] = None
            elif name in rejected:
                deciding = min(looks.values(), key=lambda t: t.p / self.weight(t.runs))
                out[name] = self._gain(deciding, rejected[name], decided=True)
            else:
                out[name] = self._gain(looks[max(looks)], stop_level, decided=False)
        return out

    def _gain(self, test: PairedTest, level: float, *, decided: bool) -> Gain:
        gain = test.gain(1 - level * self.weight(test.runs), reference=self.reference)
        gain.method += f"; family-wise: Holm across the sweep's candidates at alpha {self.alpha:g}, weighted over the looks"
        if decided and gain.verdict not in ("faster", "slower"):  # rounding at the boundary: the rule decided
            gain.verdict = "faster" if test.mean > 0 else "slower"
        if not decided and gain.verdict in ("faster", "slower"):
            gain.verdict = "undecided"
        return gain

