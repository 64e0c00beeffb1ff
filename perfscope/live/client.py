"""`perfscope capture`: ask a running hooked job for a trace of its next steps, wait, and diagnose it.

Design notes: docs/hooks.md."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from perfscope.errors import UserError
from perfscope.live import protocol as p
from perfscope.results import Results
from perfscope.results.messages import msg

HOW_TO_ENABLE = ("add `prof = perfscope.Profiler(model, optimizer)` and `prof.step()` after each optimizer step "
                 "(or `for batch in prof.wrap(loader)`), or the Lightning / Hugging Face callback "
                 "(perfscope.hooks.integrations); a job accepts requests once its warm-up steps are done")
START_MARGIN_STEPS = 2
"""Steps of slack, beyond the pollers' delay, before the first step every rank is asked to record."""
ALIGN_ATTEMPTS = 3
"""Requests before giving up on ranks recording the same steps. The start step is a forecast from heartbeats; a rank
that reads the request after passing it (a loaded host, a loop still speeding up) records later steps, so the traces
are compared and, if they differ, discarded and asked again with twice the slack."""


@dataclass(frozen=True)
class Target:
    pid: int | None = None
    control: Path | None = None
    """A control folder the ranks share (the job's live_dir), instead of a PID."""


def members(target: Target) -> tuple[Path, list[p.Status]]:
    """The control folder and the live processes that will answer; UserError when there is none."""
    if target.pid is not None:
        pid = target.pid
        registered = p.read_json(p.registry_root() / f"{pid}.json", p.Status)
        if registered is None or not p.alive(registered):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                raise UserError(f"no process {pid}") from None
            except PermissionError:
                pass
            raise UserError(f"process {pid} runs no perfscope hooks that accept captures: {HOW_TO_ENABLE}")
        control = Path(registered.control)
    else:
        assert target.control is not None
        control = target.control
        if not control.is_dir():
            raise UserError(f"--dir {control}: no such folder")
    found = [s for s in p.statuses(control) if p.alive(s)]
    if target.pid is not None and not any(s.pid == target.pid for s in found):
        found.append(registered)
    if not found:
        raise UserError(f"--dir {control}: no live hooked process is registered there ({HOW_TO_ENABLE}, with "
                        f"Profiler(live=\"{control}\") or {p.DIR_ENV}={control})")
    return control, found


def start_step(found: list[p.Status], now: float, slack: float = 1.0) -> int | None:
    """For more than one process: a step every rank reaches after it has read the request (by its last heartbeat's
    step and rate, plus ``slack`` × (its polling delay + 1 s, and START_MARGIN_STEPS)); one process starts at its
    next step."""
    if len(found) < 2:
        return None
    ahead = [s.step + s.steps_per_s * (now - s.updated + slack * (2 * (s.poll_s or 0) + 1)) for s in found]
    return int(max(ahead) + slack * START_MARGIN_STEPS)


def refreshed(control: Path, found: list[p.Status], *, until_rated: bool = False) -> list[p.Status]:
    """The members' newest heartbeats; ``until_rated``: waiting (up to a few heartbeats) until each has a step rate,
    which a process registered moments ago has not, for start_step's forecast."""
    deadline = time.monotonic() + 2 * max(p.heartbeat_s(s.poll_s or 0) for s in found) + 1
    while True:
        newest = {(s.pid, s.host): s for s in p.statuses(control)}
        current = [newest.get((s.pid, s.host), s) for s in found]
        if not until_rated or all(s.steps_per_s > 0 for s in current) or time.monotonic() > deadline:
            return current
        time.sleep(0.1)


def ask(control: Path, found: list[p.Status], steps: int, *, memory: bool = False, slack: float = 1.0) -> p.Request:
    """Write the request, then signal the processes of this host that listen for one."""
    request = p.new_request(steps, start_step(found, time.time(), slack), memory=memory)
    p.write_json(control / p.REQUEST, request)
    for status in found:
        if status.signal and status.host == p.host():
            try:
                os.kill(status.pid, getattr(signal, status.signal))
            except (ProcessLookupError, PermissionError, AttributeError):
                pass  # its poller (if any) reads the request; otherwise it is reported as gone below
    return request


def wait(control: Path, request: p.Request, found: list[p.Status], deadline: float, timeout_s: float) -> list[p.Answer]:
    """Every process's answer by ``deadline`` (time.monotonic(), the end of the command's ``timeout_s``); UserError
    naming the processes that exited or never answered."""
    answers: dict[int, p.Answer] = {}
    while True:
        for i, status in enumerate(found):
            if i not in answers and (a := p.read_json(p.answer_path(control, request.id, status), p.Answer)) is not None:
                answers[i] = a
        missing = [s for i, s in enumerate(found) if i not in answers]
        if not missing:
            return [answers[i] for i in range(len(found))]
        gone = [s for s in missing if not p.alive(s)]
        if gone:
            raise UserError(f"process {', '.join(str(s.pid) for s in gone)} exited before its capture finished "
                            f"(request {request.id})")
        if time.monotonic() > deadline:
            raise UserError(f"no answer from process {', '.join(str(s.pid) for s in missing)} within {timeout_s:g} s "
                            f"(still before step {request.start_step or 'its next'}? is its loop stalled, or {control} "
                            "full or not writable?); the job keeps running")
        time.sleep(0.1)


def capture(target: Target, *, steps: int, out: Path, timeout_s: float, command: list[str] | None = None,
            memory: bool = False) -> tuple[Results, list[p.Answer]]:
    """Ask, wait, copy the traces into ``out/trace/`` and read them as `perfscope trace` does (not yet saved);
    ``memory``: each rank's memory by category too, into ``out/memory-rank<R>.json`` and a note."""
    from perfscope.results.io import copy_file
    from perfscope.trace.offline import trace_results

    control, found = members(target)
    request, answers, attempts = aligned_answers(control, found, steps, memory=memory, timeout_s=timeout_s)
    ranks = [a.rank for a in answers] if len({a.rank for a in answers}) == len(answers) else range(len(answers))
    try:
        (out / "trace").mkdir(parents=True, exist_ok=True)
        for answer, rank in zip(answers, ranks):
            copy_file(Path(answer.trace), out / "trace" / f"rank{rank}.json.gz")  # type: ignore[arg-type]
            if answer.memory:
                copy_file(Path(answer.memory), out / f"memory-rank{rank}.json")
    finally:
        _discard(control, request, found)  # the job's folder keeps no copy
    results = trace_results(out / "trace", command=command)
    results.workload.name = f"capture of process {target.pid}" if target.pid is not None else f"capture of {control.name}"
    for a in answers:
        results.notes.append(msg("captured_on_demand", first=a.first_step, last=a.last_step, pid=a.pid, host=a.host,
                                 rank=a.rank, requested=a.requested_step, steps=steps, attempts=attempts))
    if memory:
        _add_memory(results, out, sorted(ranks))
    return results, answers


def aligned_answers(control: Path, found: list[p.Status], steps: int, *, memory: bool,
                     timeout_s: float) -> tuple[p.Request, list[p.Answer], int]:
    """Every process's answer to one request whose traces cover the same steps (one process: its first answer),
    the request and how many were made; UserError when a process could not capture, or after ALIGN_ATTEMPTS."""
    deadline = time.monotonic() + timeout_s  # one --timeout for every request
    if len(found) > 1:
        found = refreshed(control, found, until_rated=True)
    windows: list[str] = []
    for attempt in range(ALIGN_ATTEMPTS):
        request = ask(control, found, steps, memory=memory, slack=2.0 ** attempt)
        try:
            answers = wait(control, request, found, deadline, timeout_s)
            if failed := [a for a in answers if a.trace is None]:
                raise UserError("; ".join(f"process {a.pid} (rank {a.rank}) could not capture: {a.error}"
                                          for a in failed))
        except BaseException:  # the others' traces and answers leave the job's folder too
            _discard(control, request, found)
            raise
        if len({(a.first_step, a.last_step) for a in answers}) == 1:
            return request, answers, attempt + 1
        windows.append(", ".join(f"rank {a.rank} {a.first_step}-{a.last_step}" for a in answers))
        _discard(control, request, found)
        found = refreshed(control, found)
    raise UserError(f"the processes recorded different steps in each of {ALIGN_ATTEMPTS} requests "
                    f"({'; '.join(windows)}): is one of them stalled, or are they not one job?")


def _discard(control: Path, request: p.Request, found: list[p.Status]) -> None:
    """A request's copies of the traces and its answers, from the job's control folder; the folders emptied (a
    process's own folder when it ended meanwhile), never one the user made."""
    shutil.rmtree(control / "captures" / request.id, ignore_errors=True)
    for status in found:
        p.answer_path(control, request.id, status).unlink(missing_ok=True)
    for folder in (control / "captures", control):
        if folder.parent != control.parent or control.parent == p.registry_root():
            with contextlib.suppress(OSError):
                folder.rmdir()


def _add_memory(results: Results, out: Path, ranks: list[int]) -> None:
    """Each rank's memory by category as a note; the lowest rank's (the trial's rank, as `perfscope trace` takes
    it) as the trial's categories and breakdown by owner at the peak."""
    from perfscope.trace.memory_categories import memory_text, owners, read_memory

    for rank in ranks:
        path = out / f"memory-rank{rank}.json"
        if not path.is_file():
            results.notes.append(msg("rank_memory_not_written", rank=rank))
            continue
        memory = read_memory(path)
        results.notes.append(msg("rank_memory", rank=rank, memory=memory_text(memory), file=path.name))
        if rank == ranks[0] and results.trials:
            results.trials[0].metrics.memory_breakdown = owners(memory)
            results.trials[0].metrics.memory_categories = memory
