"""Count the structure of one training step: ops, FLOPs by op and dtype, syncs with call sites, copies.

Design notes: docs/measurement.md."""

from __future__ import annotations

import os
import sys
import sysconfig
import warnings
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import _tensor_str
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from perfscope.measure.flops import StepFlopCounter
from perfscope.results.fingerprint import CompileFacts, CopyStat, Fingerprint, SyncSite, WindowSyncs
from perfscope.results.messages import Message, error, msg
from perfscope.results.trace_facts import TraceFacts

SYNC_OPS: dict[str, str] = {
    "aten::_local_scalar_dense": "aten::_local_scalar_dense (.item())",
    "aten::nonzero": "aten::nonzero (boolean-mask index, torch.where(mask))",
    "aten::masked_select": "aten::masked_select",
    "aten::_unique2": "aten::unique",
    "aten::unique_consecutive": "aten::unique_consecutive",
    "aten::repeat_interleave": "aten::repeat_interleave (tensor repeats)",
}
"""Ops whose output size or value the host must wait for: on a GPU each drains the launch queue."""

MASK_INDEX_OPS: dict[str, str] = {
    "aten::index": "aten::index with a boolean mask (x[mask])",
    "aten::index_put": "aten::index_put with a boolean mask (x[mask] = v)",
    "aten::index_put_": "aten::index_put with a boolean mask (x[mask] = v)",
    "aten::_index_put_impl": "aten::index_put with a boolean mask (x[mask] = v)",
}
"""Indexing by a boolean mask turns the mask into indices (nonzero) inside the kernel, below the dispatcher
where a mode sees it: the output size depends on the mask's values, so the host waits. Counted from the index."""

HOST_READS: dict[str, str] = {
    "_str": "print/str/repr of a tensor (formats its values on the host)",
    "tolist": "tensor.tolist()",
    "numpy": "tensor.numpy()",
}
"""Reads of a tensor's values that no dispatch mode sees: torch formats tensors with the modes disabled, and
tolist()/numpy() read host memory directly. Counted by wrapping them for the counted step only."""

_COPY_OPS = frozenset({"aten::_to_copy", "aten::copy_"})

_DTYPES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32", torch.float64: "fp64"}

_TORCH_DIR = str(Path(torch.__file__).resolve().parent) + os.sep
_PERFSCOPE_DIR = str(Path(sys.modules["perfscope"].__file__ or "").resolve().parent) + os.sep
_TORCH_OPTIM_DIR = _TORCH_DIR + "optim" + os.sep
_STDLIB_DIR = os.path.realpath(sysconfig.get_paths()["stdlib"]) + os.sep
_MEASURE_DIR = _PERFSCOPE_DIR + "measure" + os.sep
_DISPATCH_INFRA = ("utils/_python_dispatch.py", "_ops.py", "utils/flop_counter.py", "utils/module_tracker.py",
                   "_dynamo/eval_frame.py", "torch/_compile.py")


def op_name(func: Any) -> str:
    """"aten::mm" for aten.mm.default: the op without its overload (one family per op)."""
    name = func._overloadpacket._qualified_op_name if hasattr(func, "_overloadpacket") else str(func)
    return str(name)


def _shown(path: str, line: int) -> str:
    cwd = os.getcwd() + os.sep
    if path.startswith(cwd):
        return f"{path[len(cwd):]}:{line}"
    if path.startswith(_TORCH_DIR):
        return f"torch/{path[len(_TORCH_DIR):]}:{line}"
    return f"{os.path.basename(path)}:{line}"


def call_site() -> str:
    """Where the host read a tensor: "path/file.py:42" of the innermost user frame (relative to the working
    directory when under it, else the file name); failing that, the innermost torch frame
    ("torch/optim/optimizer.py:90": torch's own read, e.g. an optimizer's step count); "" when neither."""
    return _site_and_reader()[0]


def _site_and_reader() -> tuple[str, bool]:
    """(call_site(), whether torch.optim made the read: the innermost frame outside the dispatch machinery is in
    torch/optim, which keeps step counters on the host by design; `print(t)` reads in torch too, and counts)."""
    frame = sys._getframe(1)
    while frame is not None and os.path.realpath(frame.f_code.co_filename).startswith(_PERFSCOPE_DIR):
        frame = frame.f_back
    torch_site = ""
    reader: bool | None = None
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith("<"):
            path = os.path.realpath(filename)
            if path.startswith(_PERFSCOPE_DIR):
                break
            if path.startswith(_TORCH_DIR):
                if not path.endswith(_DISPATCH_INFRA):
                    torch_site = torch_site or _shown(path, frame.f_lineno)
                    reader = path.startswith(_TORCH_OPTIM_DIR) if reader is None else reader
            elif not path.startswith(_STDLIB_DIR):
                return _shown(path, frame.f_lineno), bool(reader)
        frame = frame.f_back
    return torch_site, bool(reader)


def classify_copy(src: torch.device, dst: torch.device, *, pinned: bool) -> str | None:
    """"h2d pinned", "d2h pageable", ... for a copy between host and device; None for a same-side copy."""
    src_host, dst_host = src.type == "cpu", dst.type == "cpu"
    if src_host == dst_host:
        return None
    return f"{'h2d' if src_host else 'd2h'} {'pinned' if pinned else 'pageable'}"


def _first_tensor(args: Any) -> torch.Tensor | None:
    return next((a for a in tree_flatten(args)[0] if isinstance(a, torch.Tensor)), None)


def _masked(args: tuple[Any, ...]) -> bool:
    """An index/index_put whose indices hold a boolean (or uint8) mask."""
    indices = args[1] if len(args) > 1 else ()
    return any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in tree_flatten(indices)[0])


class StructureCounter(TorchDispatchMode):
    """Counts one optimizer step (enter before the step, exit after); `fingerprint()` gives the result."""

    def __init__(self, device: str = "cpu") -> None:
        super().__init__()
        self.device = device
        self.flop_counter = StepFlopCounter()
        self.ops: Counter[str] = Counter()
        self.flops_by_op: Counter[str] = Counter()
        self.flops_by_dtype: Counter[str] = Counter()
        self.syncs: Counter[tuple[str, str]] = Counter()
        self.copies: dict[str, CopyStat] = {}
        self._reading = 0  # inside a wrapped host read: the copies and reads it makes are that one sync
        self._unwrap: list[tuple[Any, str, Any]] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        name = op_name(func)
        self.ops[name] += 1
        if name in SYNC_OPS:
            self.count_sync(SYNC_OPS[name], args)
        elif name in MASK_INDEX_OPS and _masked(args):
            self.count_sync(MASK_INDEX_OPS[name], args)
        before = self.flop_counter.running_total()
        out = func(*args, **kwargs)
        flops = self.flop_counter.running_total() - before
        if flops:
            self.flops_by_op[name] += flops
            first = _first_tensor(args)
            dtype = "unknown" if first is None else _DTYPES.get(first.dtype, str(first.dtype).removeprefix("torch."))
            self.flops_by_dtype[dtype] += flops
        if name in _COPY_OPS:
            self.count_copy(name, args, kwargs, out)
        return out

    def count_sync(self, label: str, args: tuple[Any, ...]) -> None:
        """A read of a tensor's value or size is a sync when the tensor lives on the device. On a CPU-only run
        every tensor is a host tensor: reads by the step's code count (on a GPU they would sync); torch.optim's
        reads of the step counters it keeps on the host on purpose do not."""
        if self._reading:
            return
        tensor = _first_tensor(args)
        on_host = tensor is None or tensor.device.type == "cpu"
        site, read_by_torch = _site_and_reader()
        if on_host and (self.device != "cpu" or read_by_torch):
            return
        self.syncs[(label, site)] += 1

    def _reader(self, label: str, original: Any) -> Any:
        def read(tensor: Any, *args: Any, **kwargs: Any) -> Any:
            if isinstance(tensor, torch.Tensor):
                self.count_sync(label, (tensor,))
            self._reading += 1
            try:
                return original(tensor, *args, **kwargs)
            finally:
                self._reading -= 1

        return read

    def count_copy(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
        if name == "aten::copy_":
            dst, src = args[0], args[1]
        else:
            src, dst = args[0], out
        if not isinstance(src, torch.Tensor) or not isinstance(dst, torch.Tensor):
            return
        host = src if src.device.type == "cpu" else dst
        kind = classify_copy(src.device, dst.device, pinned=bool(host.is_pinned()) if host.device.type == "cpu" else False)
        if kind is None:
            return
        stat = self.copies.setdefault(kind, CopyStat(count=0, bytes=0))
        stat.count += 1
        stat.bytes += src.numel() * src.element_size()
        if kind.startswith("d2h") and not kwargs.get("non_blocking", False) and not self._reading:
            self.syncs[("D2H copy (.cpu())", call_site())] += 1

    def __enter__(self) -> StructureCounter:
        self.flop_counter.__enter__()
        super().__enter__()
        # The reads no mode sees (HOST_READS) are wrapped until exit; each counts as one sync at the caller's line.
        for owner, attr in ((_tensor_str, "_str"), (torch.Tensor, "tolist"), (torch.Tensor, "numpy")):
            self._unwrap.append((owner, attr, owner.__dict__.get(attr)))
            setattr(owner, attr, self._reader(HOST_READS[attr], getattr(owner, attr)))
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            while self._unwrap:
                owner, attr, own = self._unwrap.pop()
                if own is None:
                    delattr(owner, attr)  # it was inherited (torch.Tensor from its C base): inherit it again
                else:
                    setattr(owner, attr, own)
            super().__exit__(*exc)
        finally:
            self.flop_counter.__exit__(*exc)

    def fingerprint(self, *, method: str, steps: int = 1) -> Fingerprint:
        """The counts per optimizer step (``steps``: optimizer steps the counter saw; counts must divide)."""

        def per(value: float) -> float:
            return value / steps

        return Fingerprint(
            method=method,
            flops=per(sum(self.flops_by_op.values())),
            flops_by_op={k: per(v) for k, v in sorted(self.flops_by_op.items())},
            op_calls=sum(self.ops.values()) // steps,
            ops={k: v // steps for k, v in sorted(self.ops.items())},
            syncs=[SyncSite(op=op, site=site, count=n // steps) for (op, site), n in sorted(self.syncs.items())],
            copies={k: CopyStat(count=v.count // steps, bytes=v.bytes // steps) for k, v in sorted(self.copies.items())},
            matmul_flops_by_dtype={k: per(v) for k, v in sorted(self.flops_by_dtype.items())},
        )


def _dynamo_counters() -> dict[str, Any] | None:
    if "torch._dynamo" not in sys.modules:
        return None
    from torch._dynamo.utils import counters

    return {
        "graphs": int(counters["stats"]["unique_graphs"]),
        "breaks": {str(k).strip().splitlines()[0][:200] if str(k).strip() else "?": int(v)
                   for k, v in counters["graph_break"].items()},
        "frames": int(counters["frames"]["total"]),
    }


class CompileCounters:
    """Dynamo's process-wide counters as deltas from construction: what compiling *this* trial did."""

    def __init__(self) -> None:
        self._start = _dynamo_counters()
        self._after_first: int | None = None

    def mark_first_step(self) -> None:
        now = _dynamo_counters()
        self._after_first = now["frames"] if now is not None else None

    def facts(self) -> CompileFacts | None:
        now = _dynamo_counters()
        if now is None:
            return None
        start = self._start or {"graphs": 0, "breaks": {}, "frames": 0}
        reasons = {k: v - start["breaks"].get(k, 0) for k, v in now["breaks"].items()}
        reasons = {k: v for k, v in sorted(reasons.items()) if v > 0}
        return CompileFacts(
            graphs=now["graphs"] - start["graphs"],
            graph_breaks=sum(reasons.values()),
            break_reasons=reasons,
            recompiles=now["frames"] - self._after_first if self._after_first is not None else 0,
        )


def fill_kernel_launches(fingerprint: Fingerprint, facts: TraceFacts) -> None:
    """CUDA launches per step from the profiled window, rounded to whole calls per step: compute kernels run
    (those inside CUDA graphs included), host launch calls (cudaLaunchKernel / cuLaunchKernel), CUDA-graph
    replays (cudaGraphLaunch: CUDA graphs turn hundreds of launches into one), and host sync calls the trace
    saw (cudaStreamSynchronize, cudaDeviceSynchronize, ...)."""
    if facts.device_type != "cuda" or facts.kernels.source != "kernels":
        return
    launches = {"compute kernels": round(facts.launch.kernels_per_step)}
    calls = facts.launch.launch_calls_per_step
    if calls:  # traces analyzed before the breakdown existed have none: no figure rather than a zero
        replays = sum(n for name, n in calls.items() if "graphlaunch" in name.lower())
        launches["host launch calls"] = round(sum(calls.values()) - replays)
        launches["CUDA graph replays"] = round(replays)
    for name, per_step in sorted(facts.sync.events_per_step.items()):
        if name.startswith("cuda") and round(per_step):
            launches[f"sync call {name}"] = round(per_step)
    fingerprint.kernel_launches = launches
    fingerprint.unavailable.pop("kernel_launches", None)


SYNC_WARNING = "called a synchronizing CUDA operation"
"""What torch's CUDA sync debug mode warns at each synchronizing call (c10/cuda: warn_or_error_on_sync)."""

WINDOW_SYNCS_ON_CPU = msg("window_syncs_on_cpu")


def _measurement_sync() -> bool:
    """The synchronizing call was made by perfscope's own measurement code (a clock reading its events), not by
    the step: the innermost frame outside the warning machinery, torch and the stdlib is under perfscope/measure."""
    frame = sys._getframe(2)
    while frame is not None:
        filename = frame.f_code.co_filename
        path = os.path.realpath(filename) if not filename.startswith("<") else filename
        if path.startswith(_PERFSCOPE_DIR):
            return path.startswith(_MEASURE_DIR) and not path.endswith(os.sep + "structure.py")
        if not (path.startswith(_TORCH_DIR) or path.startswith(_STDLIB_DIR) or filename.startswith("<")):
            return False
        frame = frame.f_back
    return False


class WindowSyncCounter:
    """Counts host↔device syncs over a timed window without adding one: every timed step, not one counted step.
    CUDA only (torch's sync debug mode, warnings counted by call site); enter after the window's opening synchronize."""

    def __init__(self, device: str, *, get_mode: Callable[[], int] | None = None,
                 set_mode: Callable[[int], None] | None = None) -> None:
        self.device = device
        self._get_mode = get_mode or (lambda: int(torch.cuda.get_sync_debug_mode()))
        self._set_mode = set_mode or torch.cuda.set_sync_debug_mode
        self.sites: Counter[str] = Counter()
        self.reason: Message | None = WINDOW_SYNCS_ON_CPU if device != "cuda" else None
        self._warnings: Any = None

    def __enter__(self) -> WindowSyncCounter:
        if self.reason is not None:
            return self
        try:
            if self._get_mode() != 0:
                self.reason = msg("sync_debug_mode_already_set")
                return self
            self._warnings = warnings.catch_warnings()  # restores the filters and showwarning on exit
            self._warnings.__enter__()
            warnings.filterwarnings("always", message=SYNC_WARNING)
            shown = warnings.showwarning

            def show(message: Any, category: Any, filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
                if str(message).startswith(SYNC_WARNING):
                    if not _measurement_sync():
                        self.sites[call_site()] += 1
                    return
                shown(message, category, filename, lineno, file, line)

            warnings.showwarning = show
            self._set_mode(1)
        except Exception as exc:  # noqa: BLE001 - counting must never cost the measurement
            self._restore()
            self.reason = msg("sync_debug_mode_failed", error=error(exc))
        return self

    def _restore(self) -> None:
        if self._warnings is not None:
            self._warnings.__exit__(None, None, None)
            self._warnings = None

    def __exit__(self, *exc: object) -> None:
        if self._warnings is None:
            return
        try:
            self._set_mode(0)
        finally:
            self._restore()

    def result(self, steps: int) -> WindowSyncs | None:
        """The syncs of the window's ``steps`` timed steps; None (and `reason`) when they were not counted."""
        if self.reason is not None:
            return None
        return WindowSyncs(steps=steps, sites=dict(sorted(self.sites.items())),
                           source="torch.cuda.set_sync_debug_mode('warn') over the timed window, warnings counted by call site")
