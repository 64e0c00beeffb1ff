"""The pipeline bubble: the share of a step each pipeline rank spends idle, measured and predicted.

Design notes: docs/measurement.md."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from perfscope.results.layout import StageTiming


@dataclass
class StepRecord:
    """One step of one pipeline rank: seconds of its compute calls and of the step() call."""

    forward_s: float = 0.0
    backward_s: float = 0.0
    loss_s: float = 0.0
    loss_compute_s: float = 0.0
    step_s: float = 0.0
    in_window: bool = False
    """A step of the timed window (not warm-up, not the trace's)."""
    forward_calls_s: list[float] = field(default_factory=list)
    """Each call's compute (docs/measurement.md: CPU time on CPU, synchronized wall time on CUDA)."""
    backward_calls_s: list[float] = field(default_factory=list)
    compute_clock: str = "wall"
    """How the calls' compute was timed: "thread CPU" | "process CPU" | "wall"."""

    @property
    def busy_s(self) -> float:
        return self.forward_s + self.backward_s + self.loss_s


def stage_timing(rank: int, stages: list[int], steps: list[StepRecord]) -> StageTiming:
    """Medians over the measured steps (a step's sums over its micro-batches)."""
    if not steps:
        raise ValueError("no measured pipeline steps")

    def med(values: list[float]) -> float:
        return float(statistics.median(values))

    idle = [max(0.0, 1.0 - s.busy_s / s.step_s) if s.step_s > 0 else 0.0 for s in steps]
    # One call's compute is its fastest timing, on either clock. Load only adds to a call (a preemption on the wall
    # clock; on the CPU clock cache refills after one, a busy SMT sibling, a send thread on the same core), never
    # takes away, so the fastest of the window's calls is the stage's own cost.
    forward_call = min((t for s in steps for t in s.forward_calls_s), default=0.0)
    backward_call = min((t for s in steps for t in s.backward_calls_s), default=0.0)
    return StageTiming(rank=rank, stages=list(stages), forward_s=med([s.forward_s for s in steps]),
                       backward_s=med([s.backward_s for s in steps]), loss_s=med([s.loss_s for s in steps]),
                       step_s=med([s.step_s for s in steps]), idle_share=min(1.0, med(idle)),
                       forward_call_s=forward_call, backward_call_s=backward_call,
                       compute_clock=steps[0].compute_clock)


def measured_bubble(timings: list[StageTiming]) -> float | None:
    """Mean over the pipeline's ranks of their median idle share."""
    return sum(t.idle_share for t in timings) / len(timings) if timings else None


def imbalance(compute_s: list[float]) -> float | None:
    """Busiest rank's compute over the mean, − 1 (0: perfectly balanced stages). ``compute_s``: each rank's
    load-immune compute per micro-batch (its stages' fastest forward + backward calls, the loss on the last): the
    wall-clock busy time of a rank also holds the time its core ran a neighbour, and read 36 % on a balanced pipeline
    of a loaded machine."""
    mean = sum(compute_s) / len(compute_s) if compute_s else 0.0
    return max(compute_s) / mean - 1.0 if mean > 0 else None


@dataclass(frozen=True)
class Action:
    """One compute action of a schedule: a forward ("F") or full backward ("B") of a micro-batch on a stage."""

    stage_index: int
    computation_type: str
    microbatch_index: int


def schedule_order(schedule: str, stages: int, microbatches: int) -> dict[int, list[Action]]:
    """The order each rank runs its actions in, as torch's single-stage schedules run them (schedules.py
    `_step_microbatches`): GPipe runs every forward, then every backward; 1F1B runs min(m, p − s) forwards on stage
    s, then alternates one backward and one forward, then the remaining backwards. (Torch's own `pipeline_order`
    for Schedule1F1B, kept for its visualizer, numbers the last stage's micro-batches from 1: not used.)"""
    order: dict[int, list[Action]] = {}
    for s in range(stages):
        forwards = [Action(s, "F", i) for i in range(microbatches)]
        backwards = [Action(s, "B", i) for i in range(microbatches)]
        if schedule == "gpipe":
            order[s] = forwards + backwards
            continue
        if schedule != "1f1b":
            raise ValueError(f"no single-stage order for schedule {schedule!r}")
        warmup = min(microbatches, stages - s)
        acts = forwards[:warmup]
        f, b = warmup, 0
        while b < microbatches:
            acts.append(backwards[b])
            b += 1
            if f < microbatches:
                acts.append(forwards[f])
                f += 1
        order[s] = acts
    return order


def replay_bubble(order: dict[int, list[Any]], forward_s: dict[int, float], backward_s: dict[int, float]) -> float:
    """Replay a schedule's per-rank action lists with fixed per-stage times and free communication.

    ``order``: rank → actions (None = idle slot) with ``stage_index``, ``computation_type`` ("F", "B" or a
    full backward) and ``microbatch_index``, as torch.distributed.pipelining schedules expose them. A forward of
    micro-batch i on stage s waits for stage s − 1's forward of i; a backward waits for stage s + 1's backward of
    i (the last stage: its own forward). Each rank runs its actions in order. Returns 1 − mean busy / makespan.
    """
    last = max(forward_s)
    done: dict[tuple[str, int, int], float] = {}
    queues = {r: [a for a in acts if a is not None and _kind(a) in ("F", "B")] for r, acts in order.items()}
    clock = dict.fromkeys(queues, 0.0)
    busy = dict.fromkeys(queues, 0.0)
    progressed = True
    while progressed and any(queues.values()):
        progressed = False
        for rank, queue in queues.items():
            while queue:
                action = queue[0]
                kind, stage, mb = _kind(action), int(action.stage_index), int(action.microbatch_index)
                dep = (("F", stage - 1, mb) if stage > 0 else None) if kind == "F" else (
                    ("B", stage + 1, mb) if stage < last else ("F", stage, mb))
                if dep is not None and dep not in done:
                    break
                start = max(clock[rank], done[dep] if dep is not None else 0.0)
                cost = forward_s[stage] if kind == "F" else backward_s[stage]
                clock[rank] = done[(kind, stage, mb)] = start + cost
                busy[rank] += cost
                queue.pop(0)
                progressed = True
    if any(queues.values()):
        raise ValueError("the schedule's actions have a dependency that never completes")
    makespan = max(clock.values())
    return 1.0 - (sum(busy.values()) / len(busy)) / makespan if makespan > 0 else 0.0


def _kind(action: Any) -> str:
    value = getattr(action.computation_type, "value", str(action.computation_type))
    if value == "F":
        return "F"
    return "B" if value in ("B", "FULL_BACKWARD") else value
