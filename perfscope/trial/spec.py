"""What a trial process is asked to do: one typed spec per mode, crossing the process boundary as checked JSON.

Design notes: docs/measurement.md."""

from __future__ import annotations

import dataclasses
import json
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Union

from perfscope.errors import ResultsError
from perfscope.results.config import TrialConfig
from perfscope.results.io import write_text
from perfscope.results.serde import from_jsonable, to_jsonable
from perfscope.trial.launch import Launch


class SpecError(ValueError):
    """A spec file that does not describe a known trial mode: a perfscope bug (the parent wrote it), never user input."""


@dataclass(frozen=True, kw_only=True)
class ProbeSpec:
    """Resolve the device, validate and inspect the workload, describe the machine (perfscope.analyze.probe)."""

    mode: ClassVar[str] = "probe"
    device: str
    """"auto", "cpu" or "cuda": the probe resolves "auto"."""
    workload_path: str | None = None
    """None: only the machine is described."""
    measure_ceiling: bool = True
    result_path: str | None = None
    """Set by the runner, which owns the trial's folder."""


@dataclass(frozen=True, kw_only=True)
class TrialSpec:
    """One measured run of a configuration; a torchrun job of ranks (perfscope.trial.rank) when ``launch`` is set."""

    mode: ClassVar[str] = "trial"
    workload_path: str
    config: TrialConfig
    artifacts_dir: str | None = None
    """Where the trace goes; None: no diagnostics are written."""
    launch: Launch | None = None
    result_path: str | None = None

    @property
    def device(self) -> str:
        return self.config.device


@dataclass(frozen=True, kw_only=True)
class FollowSpec:
    """A rank on another node (`perfscope worker`): how to join the job; what to run comes from rank 0
    (perfscope.trial.rank.agree_on_spec), with this node's own paths."""

    mode: ClassVar[str] = "follow"
    device: str
    workload_path: str
    work_dir: str
    launch: Launch
    result_path: str | None = None


@dataclass(frozen=True, kw_only=True)
class StopSpec:
    """Node 0's last job of an analysis: every rank joins, and the other nodes' workers go home."""

    mode: ClassVar[str] = "stop"
    device: str
    launch: Launch
    result_path: str | None = None


ChildSpec = Union[ProbeSpec, TrialSpec, FollowSpec, StopSpec]  # noqa: UP007 - a runtime value, also on Python 3.10
MODES: dict[str, type[ChildSpec]] = {cls.mode: cls for cls in (ProbeSpec, TrialSpec, FollowSpec, StopSpec)}  # type: ignore[misc]


def spec_to_dict(spec: ChildSpec) -> dict[str, Any]:
    """The JSON-able form: the mode as a tag, then the fields (a TrialConfig and a Launch as their own dicts)."""
    return {"mode": spec.mode, **to_jsonable(spec)}


def spec_from_dict(data: Any) -> ChildSpec:
    """The spec ``data`` describes, every field checked as results are (perfscope.results.serde) and no unknown one
    allowed: the parent wrote it with this very perfscope. SpecError names what is wrong."""
    if not isinstance(data, dict):
        raise SpecError(f"a trial spec is a JSON object, got {type(data).__name__}")
    mode = data.get("mode")
    cls = MODES.get(mode) if isinstance(mode, str) else None
    if cls is None:
        raise SpecError(f"unknown trial mode {mode!r} (known: {', '.join(MODES)})")
    fields = {k: v for k, v in data.items() if k != "mode"}
    _refuse_unknown(cls, fields, f"{mode} spec")
    try:
        return from_jsonable(cls, fields, f"{mode} spec")
    except ResultsError as exc:
        raise SpecError(str(exc)) from None


def write_spec(path: Path, spec: ChildSpec) -> None:
    write_text(path, json.dumps(spec_to_dict(spec)))


def read_spec(path: Path) -> ChildSpec:
    """The child's side: the spec its parent wrote, which must say where the result goes."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise SpecError(f"unreadable trial spec {path}: {exc}") from exc
    spec = spec_from_dict(data)
    if not spec.result_path:
        raise SpecError(f"the {spec.mode} spec {path} has no result_path")
    return spec


def _refuse_unknown(cls: type, data: Any, where: str) -> None:
    if not isinstance(data, dict):
        return  # from_jsonable names what it expected
    if unknown := sorted(set(data) - {f.name for f in dataclasses.fields(cls)}):
        raise SpecError(f"{where}: unknown field(s) {unknown}")
    hints = typing.get_type_hints(cls)
    for name, value in data.items():
        for inner in typing.get_args(hints[name]) or (hints[name],):
            if dataclasses.is_dataclass(inner):
                _refuse_unknown(inner, value, f"{where}.{name}")  # type: ignore[arg-type]
