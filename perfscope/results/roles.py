"""Which runs play which role: the baseline, the recommendation, a configuration's representative run.

    baseline = baseline_run(results)                 # the run the rules diagnose
    name = recommended_configuration(results)        # "amp_bf16", "stack2-compile", or "baseline"

Defined once here because the rules, the report and the CI gate must agree on it.
"""

from __future__ import annotations

from perfscope.results.dataset_profile import DatasetProfile
from perfscope.results.model import Results, Trial

BASELINE = "baseline"


def baseline_configuration(results: Results) -> str:
    return results.sweep.baseline_trial if results.sweep is not None else BASELINE


def recommended_configuration(results: Results) -> str | None:
    """The sweep's recommendation (the baseline's name when nothing was decidedly faster); None without a sweep."""
    if results.sweep is None:
        return None
    return results.sweep.recommended_trial


def representative(results: Results, configuration: str) -> Trial | None:
    """The run to show for a configuration: its traced run when it has one, else its first run."""
    runs = results.runs(configuration)
    if not runs:
        return None
    return next((t for t in runs if t.metrics is not None and t.metrics.trace_path), runs[0])


def baseline_run(results: Results) -> Trial | None:
    """The baseline's representative run, or the first successful run of a results file without one."""
    return representative(results, baseline_configuration(results)) or next(iter(results.ok_trials()), None)


def recommended_run(results: Results) -> Trial | None:
    name = recommended_configuration(results)
    return representative(results, name) if name is not None else None


def dataset_profile(results: Results, trial: Trial) -> DatasetProfile | None:
    """The Dataset's profile of ``trial``'s configuration: its own, else the first of its sibling runs that has one.

    Where ``__getitem__`` spends its time belongs to the configuration, not to one run: when the run that profiled it
    was excluded as contended (or its retry waited less than the profiling threshold), the diagnosis keeps it.
    """
    own = trial.metrics.dataset_profile if trial.metrics is not None else None
    if own is not None:
        return own
    siblings = (t for t in results.trials if t.configuration == trial.configuration and t.ok)
    return next((t.metrics.dataset_profile for t in siblings if t.metrics.dataset_profile is not None), None)
