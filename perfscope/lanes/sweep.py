"""The sweep on several lanes at once: the same decisions as the sequential sweep, several pairs in flight.

    sweep = run_sweep(session, workload, base, options, sweeper=lane_sweeper(runners, executor))

`LaneSweeper` is perfscope.search.sweep.Sweeper with one change: where the sweep measures, up to one pair
(a candidate run and a baseline run, in a random order) runs on each lane at a time. What it decides — which
candidates, how many runs, when to stop, the verdicts — is the Sweeper's own code, so every executor gives the same
statistics. Where it gains time:
- first runs: every knob's variants are queued and measured together, one pair per lane, when the sweep first
  needs a verdict (a knob that builds on another waits for it, as in the sequential sweep);
- refinement: the open candidates with the most promising intervals get their next run together, one per lane.
The micro-batch search, stacking and confirmation decide run by run: they measure one pair at a time, on a lane.

Every comparison is within a lane: a candidate run's local reference is its own lane's baseline runs
(perfscope.search.compare), so a lane's speed cancels in each ratio, the between-lane spread of a knob's effect
lands in the candidate's own variance, and the family's error bound holds as on one lane (benchmarks.lanes_model).
A candidate's runs rotate over the lanes (each run on the free lane where it has run least), so no knob is
tied to a slow card. An A/A check (perfscope.lanes.aa) opens the sweep. A lane the executor loses is dropped with
its reason; its finished runs count; the pair it was running goes to another lane.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any, TypeVar

from perfscope.lanes.aa import AA_RUNS, check_lanes
from perfscope.lanes.executors import LaneFailure
from perfscope.results import Trial
from perfscope.results.config import TrialConfig
from perfscope.results.messages import msg
from perfscope.results.verdicts import LaneRecord, ParallelSweep
from perfscope.search.candidate import BASELINE, Candidate
from perfscope.search.compare import log_rate
from perfscope.search.microbatch import MicroBatchResult
from perfscope.search.sweep import Sweeper
from perfscope.trial.session import IN_FLIGHT, LaneRunner

T = TypeVar("T")
Request = tuple[str, TrialConfig, list[str]]
WAIT_TICK_S = 0.5
"""How often the driver wakes while lanes run: Ctrl-C reaches only the main thread, and only between waits."""


class AllLanesLost(LaneFailure):
    """No lane is left to measure on: the sweep stops with what it has."""


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
                unavailable={**env.unavailable, "numa_nodes": "the lanes fix each run's cores, NUMA node by node"}))
        super().__init__(**kw)
        self.lanes, self.active = list(lanes), list(lanes)
        self.cancel, self.parallel = cancel, parallel
        self.records = {r.index: _record(r) for r in lanes}
        self.sweep.parallel = ParallelSweep(executor=executor, lanes=list(self.records.values()))
        self.visits: Counter[tuple[str, int]] = Counter()
        self._rotation = 0
        self._queued: list[Candidate] = []
        self._aa_names: set[str] = set()
        self._cancelled = False
        self._pool = ThreadPoolExecutor(max_workers=len(self.lanes)) if parallel and len(self.lanes) > 1 else None
        if cores:
            self.sweep.parallel.notes.append(msg("knobs_sized_for_lane", cores=min(cores)))

    # ------------------------------------------------------------------------------ the sweep

    def run(self) -> Any:
        try:
            self.aa_check()
            return super().run()
        except AllLanesLost as exc:
            self.sweep.stopped_early = str(exc)
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
        """The baseline `AA_RUNS` times on every lane; outlying lanes dropped (perfscope.lanes.aa)."""
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
        for index, why in check.outliers.items():
            self._drop(next(lane for lane in self.active if lane.index == index), why)
        parallel.notes.append(msg("aa_check", runs=AA_RUNS, spread=check.spread, dropped=len(check.outliers)))
        if not self.active:
            raise AllLanesLost("every lane failed or was dropped in the A/A check")

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
                raise AllLanesLost("every lane was lost: " + "; ".join(
                    f"lane {r.index}: {r.dropped}" for r in self.records.values() if r.dropped))
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
        """Each task on its lane, at once (in order without a pool); a lane's failure is returned, not raised."""
        if self._pool is None:
            out: list[T | LaneFailure] = []
            for lane, task in tasks:
                try:
                    out.append(task(lane))
                except LaneFailure as exc:
                    out.append(exc)
            return out
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
        if self._pool is not None:
            self._pool.shutdown(wait=False)


def _record(runner: LaneRunner) -> LaneRecord:
    lane = getattr(runner, "lane", None)
    return LaneRecord(index=runner.index, device=getattr(lane, "device", None),
                      cpus=sorted(getattr(lane, "cpus", None) or []))


def lane_sweeper(lanes: Sequence[LaneRunner], executor: str, cancel: Callable[[], str]) -> Callable[..., Sweeper]:
    """What perfscope.search.sweep.run_sweep builds the sweep with, for these lanes."""
    return functools.partial(LaneSweeper, lanes=lanes, executor=executor, cancel=cancel)
