"""Comparability: whether two runs may be compared at all, before any statistics.

    >>> [words(d.message) for d in find_differences(current_side, baseline_side, metric_ids={"mfu"})]
    ["device name: baseline 'NVIDIA A100-SXM4-80GB', current 'NVIDIA H100 80GB HBM3'"]

Design notes: docs/ci-gate.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection
from dataclasses import dataclass

from perfscope.check.metrics import Side
from perfscope.results.messages import Message, msg


@dataclass(frozen=True, kw_only=True)
class Difference:
    """One property the two runs do not share."""

    what: str
    baseline: str
    current: str
    blocking: bool  # False: worth a warning, never refuses the comparison (e.g. torch version)
    hint: Message | None = None  # what the difference does, or what to do about it
    host: bool = False  # the machine or its software changed (not comparable), not the input (unusable)

    @property
    def change(self) -> Message:
        """"cores 2.0 → 4.0": the short form of a not-comparable headline."""
        return msg("difference_change", what=self.what, baseline=self.baseline, current=self.current)

    @property
    def message(self) -> Message:
        """The difference's line (worded by perfscope.check.render and GateReport.warnings)."""
        return msg("difference", what=self.what, baseline=self.baseline, current=self.current, hint=self.hint)


@dataclass(frozen=True, kw_only=True)
class Attribute:
    """A property two runs must share for their numbers to be comparable."""

    what: str
    get: Callable[[Side], object]
    blocking: bool = True
    only_for: frozenset[str] | None = None  # metric ids whose values depend on it; None: all metrics
    hint: Message | None = None
    needs_metrics: bool = False  # read from TrialMetrics: skipped when a trial failed and has none
    unknown_blocks: bool = True  # False: a value missing from one file (older writer, hooks) only warns
    host: bool = False  # a property of the machine or its software stack, not of the input

    def differs(self, current: Side, baseline: Side, metric_ids: Collection[str]) -> Difference | None:
        if self.only_for is not None and not self.only_for & set(metric_ids):
            return None
        if self.needs_metrics and (current.trial.metrics is None or baseline.trial.metrics is None):
            return None
        cur, base = self.get(current), self.get(baseline)
        if _same(cur, base):
            return None
        unknown = cur is None or base is None
        blocking = self.blocking and (self.unknown_blocks or not unknown)
        hint = msg("hint_not_recorded") if unknown and not self.unknown_blocks else self.hint
        return Difference(what=self.what, baseline=repr(base), current=repr(cur), blocking=blocking, hint=hint,
                          host=self.host)


def _same(a: object, b: object) -> bool:
    """Equality, with floats compared to a relative 1e-9 (a JSON round trip must not create a mismatch)."""
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-9)
    return a == b


def _metric(side: Side, name: str) -> object:
    return getattr(side.trial.metrics, name)


def _world_size(side: Side) -> int:
    """Ranks of the run's job: what its ranks reported, else what it was launched with (1: one process)."""
    facts = side.trial.metrics.distributed if side.trial.metrics is not None else None
    return facts.world_size if facts is not None else side.trial.config.world_size


ATTRIBUTES: list[Attribute] = [
    Attribute(what="device type", get=lambda s: s.results.environment.device_type, host=True),
    Attribute(what="device name", get=lambda s: s.results.environment.device_name, host=True),
    Attribute(what="dtype (trial precision)", get=lambda s: None if "precision" in s.trial.unknown_settings else s.trial.config.precision,
              unknown_blocks=False),
    Attribute(what="workload name", get=lambda s: s.results.workload.name),
    Attribute(what="workload sha256", get=lambda s: s.results.workload.sha256,
              hint=msg("hint_workload_changed")),
    Attribute(what="world size (data-parallel ranks)", get=_world_size,
              hint=msg("hint_world_size")),
    Attribute(what="samples per step", get=lambda s: _metric(s, "samples_per_step"), needs_metrics=True,
              hint=msg("hint_batch_size")),
    Attribute(what="peak TFLOP/s (MFU denominator)", get=lambda s: s.mfu_peak.tflops if s.mfu_peak else None,
              only_for=frozenset({"mfu"}),
              hint=msg("hint_peak")),
    Attribute(what="model FLOPs per step", get=lambda s: _metric(s, "flops_per_step"), only_for=frozenset({"mfu"}),
              needs_metrics=True, hint=msg("hint_flops")),
    Attribute(what="usable CPU cores (affinity, cgroup quota)", get=lambda s: s.results.environment.cpu_cores_usable,
              unknown_blocks=False, host=True,
              hint=msg("hint_cpu_cores")),
    Attribute(what="CPU model", get=lambda s: s.results.environment.cpu_model, unknown_blocks=False, host=True,
              hint=msg("hint_cpu_model")),
    Attribute(what="torch version", get=lambda s: s.results.environment.torch_version or None, unknown_blocks=False,
              host=True,
              hint=msg("hint_torch")),
    Attribute(what="CUDA version", get=lambda s: s.results.environment.cuda_version, unknown_blocks=False, host=True,
              hint=msg("hint_cuda")),
    Attribute(what="GPU driver version", get=lambda s: s.results.environment.driver_version, unknown_blocks=False, host=True,
              hint=msg("hint_driver")),
    Attribute(what="host", get=lambda s: s.results.environment.hostname or None, blocking=False,
              hint=msg("hint_host")),
    Attribute(what="GPU UUID", get=lambda s: s.results.environment.device_uuid, blocking=False,
              hint=msg("hint_gpu_uuid")),
    Attribute(what="applied knobs", get=lambda s: sorted(s.trial.knobs), blocking=False),
]


def find_differences(current: Side, baseline: Side, *, metric_ids: Collection[str]) -> list[Difference]:
    """Every property in ATTRIBUTES that differs and matters for the metrics being gated."""
    found = (a.differs(current, baseline, metric_ids) for a in ATTRIBUTES)
    return [d for d in found if d is not None]
