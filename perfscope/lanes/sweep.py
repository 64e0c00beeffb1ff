"""The sweep on several lanes at once: the same decisions as the sequential sweep, several pairs in flight.

Design notes: docs/parallel.md."""

from __future__ import annotations

import dataclasses
import functools
import math
import statistics
import sys
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from perfscope.errors import UserError
from perfscope.lanes.executors import EXECUTORS, Executor, LaneFailure, LocalExecutor
from perfscope.lanes.plan import plan_lanes
from perfscope.results import Trial
from perfscope.results.config import TrialConfig
from perfscope.results.messages import Message, msg
from perfscope.results.verdicts import LaneRecord, ParallelSweep
from perfscope.search.candidate import BASELINE, Candidate
from perfscope.search.compare import log_rate
from perfscope.search.microbatch import MicroBatchResult
from perfscope.search.sweep import Sweeper
from perfscope.stats import robust_sigma
from perfscope.trial.session import IN_FLIGHT, LaneRunner
from perfscope.wording import words

T = TypeVar("T")
Request = tuple[str, TrialConfig, list[str]]
WAIT_TICK_S = 0.5
"""How often the driver wakes while lanes run: Ctrl-C reaches only the main thread, and only between waits."""


class AllLanesLost(LaneFailure):
    """No lane is left to measure on: the sweep stops with what it has (``why``: Sweep.stopped_early)."""

    def __init__(self, why: Message) -> None:
        super().__init__(why.code)
        self.why = why


class LaneSweeper(Sweeper):
    def __init__(self, *, lanes: Sequence[LaneRunner], executor: str = "local", cancel: Callable[[], str] = lambda: "",
                 parallel: bool = True, **kw: Any) -> None:
        ctx = kw["ctx"]
        cores = [len(c) for r in lanes if (c := getattr(getattr(r, "lane", None), "cpus", None))]
        if cores:  # the knobs see the lane's cores (DataLoader workers, threads), not the machine's; NUMA binding is
            # the lane plan's (perfscope.lanes.plan): a rank's pinning to its lane would undo torchrun's --numa-binding
            env = ctx.environment
            kw["ctx"] = dataclasses.replace(ctx, environment=dataclasses.replace(
                env, cpu_cores_logical=min(cores), numa_nodes=None,
                unavailable={**env.unavailable, "numa_nodes": msg("lanes_fix_numa")}))
        super().__init__(**kw)
        self.lanes, self.active = list(lanes), list(lanes)
        self.cancel = cancel
        self.records = {r.index: _record(r) for r in lanes}
        self.sweep.parallel = ParallelSweep(executor=executor, lanes=list(self.records.values()))
        self.visits: Counter[tuple[str, int]] = Counter()
        self._rotation = 0
        self._queued: list[Candidate] = []
        self._aa_names: set[str] = set()
        self._cancelled = False
        self._pool = ThreadPoolExecutor(max_workers=len(self.lanes) if parallel else 1)  # 1: the tasks in order
        if cores:
            self.sweep.parallel.notes.append(msg("knobs_sized_for_lane", cores=min(cores)))

    # ------------------------------------------------------------------------------ the sweep

    def run(self) -> Any:
        try:
            self.aa_check()
            return super().run()
        except AllLanesLost as exc:
            self.sweep.stopped_early = exc.why
            return self.sweep
        finally:
            self._finish()

    def may_continue(self, runs: int = 2, *, keep: int = 0) -> bool:
        return bool(self.active) and super().may_continue(runs, keep=keep)

    def measure(self, name: str, config: TrialConfig, knobs: list[str]) -> Trial:
        return self.measure_many([(name, config, knobs)])[0]

    def _first_run(self, cand: Candidate) -> None:
        """Queued: measured with the others when the sweep next needs a verdict (`judge`, the micro-batch search)."""
        self._queued.append(cand)

    def _flush(self) -> None:
        queued, self._queued = self._queued, []
        if queued:
            trials = self.measure_many([(c.name, self.first_config(c), c.knobs) for c in queued])
            for cand, trial in zip(queued, trials):
                cand.first = trial
                self._check_numerics(cand)

    def judge(self) -> None:
        self._flush()
        super().judge()

    def micro_batch(self, knobs: list[Any]) -> MicroBatchResult:
        self._flush()
        return super().micro_batch(knobs)

    def refine(self) -> None:
        """As the Sweeper's, with the most promising open candidates measured together, one per lane."""
        while True:
            self.judge()
            open_ = self.open_candidates()
            if not open_ or self._budget_ends_refinement(open_):
                return
            best = sorted(open_, key=self._promise, reverse=True)
            self.measure_many([(c.name, c.config, c.knobs) for c in self._fill(best)])

    def _fill(self, best: list[Candidate]) -> list[Candidate]:
        """One run per lane: the most promising first, and more runs of them when fewer are open than lanes (a look
        skipped by two runs at once only removes a chance to decide: the family's bound holds for any stopping)."""
        picks: list[Candidate] = []
        while len(picks) < len(self.active):
            more = [c for c in best if self.measurements[c.name] + picks.count(c) < self.options.max_runs]
            if not more:
                break
            picks += more[:len(self.active) - len(picks)]
        return picks

    # --------------------------------------------------------------------------------- lanes

    def aa_check(self) -> None:
        """The baseline `AA_RUNS` times on every lane; outlying lanes dropped (check_lanes, below)."""
        def series(lane: LaneRunner) -> list[Trial]:
            return [self._on(lane, BASELINE, self.reference, []) for _ in range(AA_RUNS)]

        done = self._run_wave([(lane, series) for lane in self.active])
        rates: dict[int, list[float]] = {}
        for lane, runs in zip(list(self.active), done):
            if isinstance(runs, LaneFailure):
                self._drop(lane, str(runs))
                continue
            self._aa_names.update(r.name for r in runs)
            rates[lane.index] = [log_rate(r) for r in runs if r.evidence and r.metrics and r.metrics.samples_per_s]
        check = check_lanes(rates)
        parallel = self.sweep.parallel
        assert parallel is not None
        parallel.aa_spread = check.spread
        for index, level in check.levels.items():
            self.records[index].level = round(math.exp(level), 4)
        for index, why in check.outliers.items():  # LaneRecord.dropped holds words (a str in schema 4)
            self._drop(next(lane for lane in self.active if lane.index == index), words(why))
        parallel.notes.append(msg("aa_check", runs=AA_RUNS, spread=check.spread, dropped=len(check.outliers)))
        if not self.active:
            raise AllLanesLost(msg("lanes_aa_all_dropped"))

    def measure_many(self, requests: Sequence[Request]) -> list[Trial]:
        """One pair per request (a random order within each, drawn here in the driver), at most one per lane at a
        time; a request whose lane is lost goes to another lane."""
        orders = [self.order.random() < 0.5 for _ in requests]
        for name, _, _ in requests:
            self.measurements[name] += 1
        out: list[Trial | None] = [None] * len(requests)
        pending = list(range(len(requests)))
        while pending:
            if not self.active:
                raise AllLanesLost(msg("lanes_all_lost", dropped={
                    str(r.index): r.dropped for r in self.records.values() if r.dropped}))
            free, wave = list(self.active), []
            for i in list(pending):
                if not free:
                    break
                lane = self._pick(requests[i][0], free)
                free.remove(lane)
                pending.remove(i)
                wave.append((i, lane))
            tasks = [(lane, functools.partial(self._pair, *requests[i], orders[i])) for i, lane in wave]
            for (i, lane), result in zip(wave, self._run_wave(tasks)):
                if isinstance(result, LaneFailure):
                    self._drop(lane, str(result))
                    pending.insert(0, i)
                else:
                    out[i] = result
        self.sweep.elapsed_s = self.elapsed() - self.start
        return [t for t in out if t is not None]

    def _pair(self, name: str, config: TrialConfig, knobs: list[str], baseline_first: bool, lane: LaneRunner) -> Trial:
        runs = [(BASELINE, self.reference, []), (name, config, knobs)]
        measured = [self._on(lane, *run) for run in (runs if baseline_first else runs[::-1])]
        return measured[1] if baseline_first else measured[0]

    def _on(self, lane: LaneRunner, name: str, config: TrialConfig, knobs: list[str]) -> Trial:
        if self._cancelled:  # Ctrl-C: a lane between two runs starts no more
            raise LaneFailure("cancelled by Ctrl-C")
        return self.session.measure(name, config, knobs, lane=lane)

    def _pick(self, name: str, free: list[LaneRunner]) -> LaneRunner:
        """The free lane where ``name`` has run least (ties rotate), so a knob's runs spread over the lanes."""
        n = len(self.lanes)
        lane = min(free, key=lambda r: (self.visits[(name, r.index)], (r.index - self._rotation) % n))
        self._rotation += 1
        self.visits[(name, lane.index)] += 1
        return lane

    def _run_wave(self, tasks: list[tuple[LaneRunner, Callable[[LaneRunner], T]]]) -> list[T | LaneFailure]:
        """Each task on its lane, at once; a lane's failure is returned, not raised."""
        futures: list[Future[T]] = [self._pool.submit(task, lane) for lane, task in tasks]
        try:
            while wait(futures, timeout=WAIT_TICK_S).not_done:
                pass
        except KeyboardInterrupt:
            self._interrupted(futures)
            raise
        results: list[T | LaneFailure] = []
        for future in futures:
            exc = future.exception()
            if exc is None:
                results.append(future.result())
            elif isinstance(exc, LaneFailure):
                results.append(exc)
            else:
                raise exc
        return results

    def _interrupted(self, futures: list[Future[Any]]) -> None:
        """Ctrl-C: cancel what the executor has in flight, let the lanes return, and mark the cancelled runs."""
        in_flight = {t.name for t in self.results.trials if t.error == IN_FLIGHT}
        self._cancelled = True
        said = self.cancel()
        while wait(futures, timeout=2.0).not_done:  # a run that started just as the first cancel went out
            self.cancel()
        for trial in self.results.trials:
            if trial.name in in_flight:
                trial.excluded = msg("cancelled_by_interrupt")
                if trial.error == IN_FLIGHT or not trial.ok:
                    trial.status, trial.error = "skipped", f"cancelled by Ctrl-C ({said})"
        parallel = self.sweep.parallel
        assert parallel is not None
        parallel.notes.append(msg("lanes_interrupted", said=said))
        self._finish()
        self.session.save()  # type: ignore[attr-defined]

    def _drop(self, lane: LaneRunner, why: str) -> None:
        if lane in self.active:
            self.active.remove(lane)
        self.records[lane.index].dropped = why
        for trial in self.results.trials:
            if trial.lane == lane.index and trial.error == IN_FLIGHT:
                trial.error = f"lost with its lane: {why}"
        progress = getattr(self.session, "progress", None)
        if progress is not None:
            progress.note(f"lane {lane.index} dropped: {why}")

    def _finish(self) -> None:
        """The lanes table: runs and failures per lane, wall time beside the sequential estimate."""
        parallel = self.sweep.parallel
        assert parallel is not None
        on_lanes = [t for t in self.results.trials if t.lane is not None]
        for record in self.records.values():
            mine = [t for t in on_lanes if t.lane == record.index]
            record.runs = len(mine)
            record.failures = sum(not t.ok for t in mine)
        parallel.wall_s = self.elapsed() - self.start
        parallel.sequential_estimate_s = sum(t.wall_time_s or 0.0 for t in on_lanes if t.name not in self._aa_names)
        self._pool.shutdown(wait=False)


def _record(runner: LaneRunner) -> LaneRecord:
    lane = getattr(runner, "lane", None)
    return LaneRecord(index=runner.index, device=getattr(lane, "device", None),
                      cpus=sorted(getattr(lane, "cpus", None) or []))


AA_RUNS = 2
"""Baseline runs per lane in the A/A check."""
OUTLIER_RATIO = 1.25
"""A lane this much faster or slower than the median lane is an outlier (the GPU-to-GPU spread of one model is ~8 %)."""
MAD_LIMIT = 2.5
"""... and further than this many robust standard deviations (1.4826 × the median absolute deviation) of the lanes'
levels: a machine whose lanes all spread widely does not lose its slowest lane for being at one end of the spread."""
MIN_LANES_FOR_OUTLIERS = 3


@dataclass
class AACheck:
    levels: dict[int, float]
    """Lane -> its mean log baseline throughput over the median lane's (0 = the median lane)."""
    spread: float | None
    """Standard deviation of the kept lanes' levels (log): the lane-to-lane spread."""
    outliers: dict[int, Message] = field(default_factory=dict)
    """Lane -> why it was dropped."""


def check_lanes(rates: dict[int, list[float]]) -> AACheck:
    """``rates``: each lane's A/A log throughputs (a lane without any has failed and is not judged here)."""
    means = {lane: statistics.fmean(r) for lane, r in rates.items() if r}
    if not means:
        return AACheck({}, None)
    middle = statistics.median(means.values())
    levels = {lane: m - middle for lane, m in means.items()}
    outliers: dict[int, Message] = {}
    if len(means) >= MIN_LANES_FOR_OUTLIERS:
        limit = max(math.log(OUTLIER_RATIO), MAD_LIMIT * robust_sigma(list(levels.values()), 0.0))
        for lane, level in levels.items():
            if abs(level) > limit:
                outliers[lane] = msg("lane_aa_outlier", level=math.exp(level), limit=math.exp(limit))
    kept = [v for lane, v in levels.items() if lane not in outliers]
    spread = statistics.stdev(kept) if len(kept) >= 2 else None
    return AACheck(levels, spread, outliers)


@dataclass(kw_only=True)
class LaneOptions:
    lanes: int | None = None
    """Lanes on this machine (each with an equal share of the cores); None with ``devices``."""
    devices: list[str] | None = None
    """One lane per device (CUDA_VISIBLE_DEVICES values)."""
    executor: str = "local"
    slurm_partition: str | None = None
    slurm_gpus_per_node: int | None = None
    ranks: int = 1
    """Processes of a torchrun trial on this node (--nproc-per-node): each lane takes that many devices as a group."""

    def __post_init__(self) -> None:
        if self.executor not in EXECUTORS:
            raise UserError(f"unknown executor {self.executor!r}; choose one of {', '.join(EXECUTORS)}")
        if self.lanes is None and not self.devices:
            raise UserError("a parallel sweep needs --lanes N or --devices LIST")
        if self.executor != "slurm" and (self.slurm_partition or self.slurm_gpus_per_node):
            raise UserError("--slurm-partition and --slurm-gpus-per-node go with --executor slurm")
        if self.ranks > 1 and self.executor != "local":
            raise UserError(f"torchrun trials ({self.ranks} ranks) run on lanes through the local executor only: the "
                            f"{self.executor} executor runs a lane's trial as one process")

    @property
    def count(self) -> int:
        """How many lanes these options ask for (what the plan's time estimate divides among)."""
        return len(self.devices) // self.ranks if self.devices else self.lanes or 1


@contextmanager
def parallel_sweep(options: LaneOptions | None, work_dir: Path, *, timeout_s: float) -> Iterator[Callable[..., Any] | None]:
    """The Sweeper factory for these lanes (None: the sequential sweep); the executor is closed afterwards."""
    if options is None:
        yield None
        return
    lanes = plan_lanes(options.lanes, options.devices, ranks=options.ranks)
    executor = _executor(options, work_dir, timeout_s)
    group = ""
    if options.ranks > 1:
        group = f"; each trial is a {options.ranks}-rank torchrun job on its lane's devices and cores, which no other trial uses"
        if options.devices:
            group += "; the lanes share this node's links (PCIe, NVLink switches): each comparison stays within a lane"
    print(f"perfscope: parallel sweep on {len(lanes)} lane(s) through the {executor.name} executor: "
          + "; ".join(lane.describe() for lane in lanes) + group, file=sys.stderr, flush=True)
    try:
        runners = [executor.runner(lane) for lane in lanes]
        yield functools.partial(LaneSweeper, lanes=runners, executor=executor.name, cancel=executor.cancel)
    finally:
        executor.close()


def _executor(options: LaneOptions, work_dir: Path, timeout_s: float) -> Executor:
    """The executor the options name (LaneOptions checked it); ray and slurm need their extra installed."""
    if options.executor == "ray":
        from perfscope.lanes.ray import RayExecutor

        return RayExecutor(work_dir)
    if options.executor == "slurm":
        from perfscope.lanes.slurm import SlurmExecutor

        return SlurmExecutor(work_dir, partition=options.slurm_partition, gpus_per_node=options.slurm_gpus_per_node,
                             timeout_s=timeout_s)
    return LocalExecutor(work_dir)
