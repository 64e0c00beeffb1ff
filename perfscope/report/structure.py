"""What each knob changed in the training step, counted, to show next to its measured gain.

    effects = knob_effects(results)          # configuration -> StructuralEffect
    effects["amp_bf16"].lines()              # ["matmul FLOPs in bf16 0% → 100% (fp32 100% → 0%)",
                                             #  "op calls per step 1781 → 1980 (aten::_to_copy +199)"]

Design notes: docs/report.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from statistics import fmean

from perfscope.check.structure import NoteCode, diff_sides, runs_consensus
from perfscope.results import Results, Trial
from perfscope.results.fingerprint import CompileFacts, Consensus
from perfscope.results.messages import Message, msg
from perfscope.results.roles import baseline_configuration
from perfscope.wording import words

DATA_WAIT_SHOWN = 0.05
"""The exposed data wait is named when it moved by at least 5 points of wall time: it is timed, and smaller
moves are within run-to-run noise (and below 5% of the step it is no data bottleneck anyway)."""

NO_CHANGE = msg("no_structural_change_counted")

EAGER_COUNT_NOTE = msg("eager_op_count")


@dataclass(frozen=True, kw_only=True)
class StructuralEffect:
    """What one configuration changed in the step against the baseline configuration."""

    counted: list[Message] = field(default_factory=list)
    """Structural changes as the CI gate says them, then what torch.compile made of the step."""
    measured: list[Message] = field(default_factory=list)
    """Timed changes that explain a gain (the exposed data wait), apart from the counted ones."""
    notes: list[Message] = field(default_factory=list)
    """How the comparison was made, or why it could not be (worded by the view)."""
    compared: bool = True
    """False when a side has no fingerprint (an older perfscope, or counting failed)."""

    def lines(self) -> list[str]:
        """One line per change for a report cell; says so when nothing changed."""
        measured = [msg("measured_change", change=m) for m in self.measured]
        if not self.compared:  # why not: in `notes`, said once for the whole table (perfscope.report.view)
            return [words(m) for m in measured]
        return [words(m) for m in [*self.counted, *measured] or [NO_CHANGE]]


def configuration_fingerprint(results: Results, configuration: str) -> Consensus:
    """The fingerprint standing for a configuration's runs (perfscope.check.structure.runs_consensus)."""
    return runs_consensus(t for t in results.trials if t.configuration == configuration)


def compile_facts(facts: CompileFacts) -> Message:
    """"torch.compile: 2 graphs, 1 graph break (reason: ...), 0 recompiles"."""
    return msg("compile_facts", graphs=facts.graphs, graph_breaks=facts.graph_breaks, reasons=list(facts.break_reasons),
               recompiles=facts.recompiles)


def _data_wait(runs: list[Trial]) -> float | None:
    shares = [t.metrics.data_wait_share for t in runs if t.metrics is not None]
    return fmean(shares) if shares else None


def _evidence(results: Results, configuration: str) -> list[Trial]:
    return results.runs(configuration) or [t for t in results.trials if t.configuration == configuration and t.ok]


def structural_effect(results: Results, configuration: str, baseline: Consensus | None = None) -> StructuralEffect | None:
    """What ``configuration`` changed against the baseline, from check's one diff (`diff_sides`); None for the
    baseline itself or a configuration without a successful run. ``baseline``: its `configuration_fingerprint`,
    when the caller derived it once."""
    base_name = baseline_configuration(results)
    runs, base_runs = _evidence(results, configuration), _evidence(results, base_name)
    if configuration == base_name or not runs:
        return None
    base = baseline or configuration_fingerprint(results, base_name)
    cur = configuration_fingerprint(results, configuration)
    measured = _data_wait_moved(base_runs, runs)
    if base.fingerprint is None or cur.fingerprint is None:  # check's note speaks of "the current run": name the configuration
        missing = msg("configuration_no_fingerprint", name=base_name if base.fingerprint is None else configuration,
                      baseline=base.fingerprint is None)
        return StructuralEffect(compared=False, notes=[missing], measured=measured)
    diff = diff_sides(base, cur, names=(base_name, configuration))
    # The baseline need not be compiled: say what compiling made rather than "the baseline is not compiled".
    notes = [n.message for n in diff.notes if not (n.code is NoteCode.NOT_COMPILED and n.side == "baseline")]
    counted = [c.message for c in diff.changes]
    if cur.fingerprint.compile is not None and base.fingerprint.compile is None:
        counted.append(compile_facts(cur.fingerprint.compile))
        notes.append(EAGER_COUNT_NOTE)
    base_batch = base_runs[0].metrics.samples_per_step if base_runs and base_runs[0].metrics else None
    batch = runs[0].metrics.samples_per_step if runs[0].metrics else None
    if base_batch and batch and base_batch != batch:
        notes.append(msg("per_step_batch_differs", batch=batch, baseline=base_batch))
    return StructuralEffect(counted=counted, measured=measured, notes=notes)


def _data_wait_moved(base_runs: list[Trial], runs: list[Trial]) -> list[Message]:
    """The exposed data wait's move, when it moved enough to show (timed, not counted: marked measured)."""
    before, after = _data_wait(base_runs), _data_wait(runs)
    if before is not None and after is not None and abs(after - before) >= DATA_WAIT_SHOWN:
        return [msg("data_wait_moved", before=before, after=after)]
    return []


def knob_effects(results: Results) -> dict[str, StructuralEffect]:
    """configuration -> what it changed, for every knob's configuration and the recommended one."""
    sweep = results.sweep
    if sweep is None:
        return {}
    names = [k.trial for k in sweep.knobs if k.trial] + ([sweep.recommended_trial] if sweep.recommended_trial else [])
    effects = {}
    baseline = configuration_fingerprint(results, baseline_configuration(results))  # once, not once per knob
    for name in dict.fromkeys(names):
        effect = structural_effect(results, name, baseline)
        if effect is not None:
            effects[name] = effect
    return effects
