"""Profiler.save(): alone, results.json and the report; in a torchrun job, every rank sends rank 0 its summary
and rank 0 writes the job's one results.json. Design notes: docs/hooks.md, "Distributed (torchrun)"."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import TYPE_CHECKING

from perfscope.hooks.distributed import (
    RankPlace,
    RankReport,
    exchange,
    find_place,
    layout,
    rank_metrics,
    without_peers,
)
from perfscope.measure.mfu import apply_utilization_ratios
from perfscope.measure.ranks import apply_job, combine_ranks, window_mean
from perfscope.pipeline import finish
from perfscope.results.distributed import RankMetrics
from perfscope.results.io import copy_file
from perfscope.results.messages import msg

if TYPE_CHECKING:
    from perfscope.hooks.state import ProfilerState
    from perfscope.results import Results


def _trace(prof: ProfilerState) -> Path | None:
    return prof._capture.trace_path if prof._capture is not None else None


def save_alone(prof: ProfilerState, out_dir: Path, final: bool, results: Results | None = None) -> Path | None:
    """results.json, the findings and the report (perfscope.pipeline.finish); a failure is a warning, never raised."""
    if prof._failed is not None:
        return None
    if final:
        prof.close()
    results = results if results is not None else prof._results(ratios=True)
    if results is None:
        return None
    try:
        path = finish(results, out_dir, trace_source=_trace(prof))
    except Exception as exc:  # noqa: BLE001
        warnings.warn(f"perfscope: could not save results to {out_dir}: {type(exc).__name__}: {exc}", RuntimeWarning,
                      stacklevel=4)
        return None
    if prof._loggers is not None:  # the user's loggers get the run's figures
        prof._loggers.final(results, prof._step_index)
    return path


def save_job(prof: ProfilerState, place: RankPlace, out_dir: Path, final: bool) -> Path | None:
    """Every rank: its summary to rank 0 (even a failed profiler's, saying why); rank 0: the job's results. The
    summaries travel under a key that is the same on every rank: the Profiler's and the save()'s count."""
    if find_place() is None:
        alone = out_dir / f"rank{place.rank}"
        warnings.warn(f"perfscope: the process group was gone at save(): rank {place.rank} saves its own results to "
                      f"{alone} (call prof.save() before destroy_process_group())", RuntimeWarning, stacklevel=4)
        return save_alone(prof, alone, final)
    if final and prof._failed is None:
        prof.close()
    results = prof._results(ratios=False) if prof._failed is None else None
    metrics = results.trials[0].metrics if results is not None else None
    trace, failed = _trace(prof), prof._failed
    try:
        why = results.trials[0].error if results is not None else None
        own = window_mean(metrics.windows, "own_cpu_cores") if metrics is not None else None  # the peers' load
        report = RankReport(rank=place.rank, error=failed, own_cpu_cores=own,
                            trace=str(trace) if trace is not None else None,
                            metrics=rank_metrics(place, metrics, prof.model, prof.optimizer, why or failed or ""))
        reports = exchange(place, report, key=f"perfscope/hooks/{prof._instance}/{prof._saves}",
                           timeout_s=prof.gather_timeout_s, device=prof.device)
    except Exception as exc:  # noqa: BLE001
        warnings.warn(f"perfscope: rank {place.rank} could not exchange its summary at save(): {type(exc).__name__}: "
                      f"{exc}" + (" (rank 0 saves its own results alone)" if place.rank == 0 else ""),
                      RuntimeWarning, stacklevel=4)
        reports = None
    if place.rank != 0 or results is None:
        return None
    if reports is not None and metrics is not None:
        try:
            make_job(place, results, reports, out_dir, gather_timeout_s=prof.gather_timeout_s)
        except Exception as exc:  # noqa: BLE001
            warnings.warn(f"perfscope: the job's figures could not be combined: {type(exc).__name__}: {exc}; "
                          "results.json holds rank 0's own", RuntimeWarning, stacklevel=4)
    if metrics is not None and metrics.distributed is None:
        apply_utilization_ratios(metrics, results.peak, results.environment)
    return save_alone(prof, out_dir, final=False, results=results)


def make_job(place: RankPlace, results: Results, reports: list[RankReport | None], out_dir: Path, *,
             gather_timeout_s: float) -> None:
    """Rank 0: every rank's metrics into ``metrics.distributed``, the trial's figures the job's, traces copied."""
    received = [r for r in reports if r is not None]
    missing = [rank for rank, r in enumerate(reports) if r is None]
    without_peers(received)
    ranks = []
    for report in received:
        rank = report.metrics or RankMetrics(rank=report.rank)
        if report.error:
            rank.unavailable["steps"] = msg("profiler_disabled_itself", error=report.error)
        ranks.append(rank)
    trial = results.trials[0]
    nnodes, nproc = layout(place, received)
    trial.config = trial.config.replace(nnodes=nnodes, nproc_per_node=nproc)
    facts = combine_ranks(ranks, backend=place.backend, data_parallel=trial.config.data_parallel, nnodes=nnodes,
                          nproc_per_node=nproc, global_batch=trial.config.global_batch)
    facts.world_size = place.world_size
    if missing:
        why = msg("ranks_did_not_report", ranks=missing, timeout_s=gather_timeout_s)
        facts.job_samples_per_s = None
        facts.unavailable["job_samples_per_s"] = why
        results.notes.append(msg("job_figures_unavailable", why=why))
    elif facts.job_samples_per_s is None:
        facts.unavailable["job_samples_per_s"] = msg("rank_without_window")
    assert trial.metrics is not None
    apply_job(trial.metrics, facts, peak=results.peak, env=results.environment)
    results.notes.append(msg("torchrun_job", ranks=place.world_size, backend=place.backend))
    for report in received:
        if report.rank == 0 or report.trace is None:
            continue
        source = Path(report.trace)
        if source.is_file():  # the same node, or a trace_dir on a shared filesystem
            (out_dir / "trace").mkdir(parents=True, exist_ok=True)
            copy_file(source, out_dir / "trace" / source.name)
        else:
            results.notes.append(msg("rank_trace_on_node", rank=report.rank, trace=report.trace))
