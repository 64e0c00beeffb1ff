"""Where the user's Dataset spends its time: N samples loaded in the trial process, timed, then profiled.

Design notes: docs/measurement.md."""

from __future__ import annotations

import cProfile
import itertools
import pstats
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from perfscope.results.dataset_profile import PROFILE_AT_DATA_WAIT, DatasetProfile, ProfiledFunction

__all__ = ["PROFILE_AT_DATA_WAIT", "profile_dataset"]

SAMPLES = 64
"""Samples per pass at most."""
BUDGET_S = 2.0
"""Wall seconds for the timed passes at most; the profiled pass loads as many samples as they did."""
TOP = 12
"""Functions kept, by self time."""
WARMUP = 2
"""Samples loaded untimed first."""

_HERE = str(Path(__file__).resolve())


def _samples(dataset: Any, n: int) -> Callable[[int], Iterator[Any]]:
    """A fresh iterator over the first ``n`` samples: indices of a map-style Dataset, next() of an iterable one."""
    if isinstance(dataset, torch.utils.data.IterableDataset):
        return lambda k: itertools.islice(iter(dataset), k)
    length = len(dataset) if hasattr(dataset, "__len__") else n
    return lambda k: (dataset[i] for i in range(min(k, length)))


def _load(samples: Callable[[int], Iterator[Any]], n: int, budget_s: float | None) -> tuple[list[Any], float]:
    """(the samples loaded, wall seconds): at most ``n``, stopping once ``budget_s`` has passed."""
    out: list[Any] = []
    start = time.perf_counter()
    for sample in samples(n):
        out.append(sample)
        if budget_s is not None and time.perf_counter() - start >= budget_s:
            break
    return out, time.perf_counter() - start


def _paired(samples: Callable[[int], Iterator[Any]], n: int, threads: int, budget_s: float) -> tuple[list[Any], float, float]:
    """(samples, wall on ``threads`` torch threads, wall on one): each sample loaded twice in a row, once each way,
    so a slow moment of the machine hits both sides and their ratio holds (two separate passes drift apart)."""
    items: list[Any] = []
    many = one = 0.0
    start = time.perf_counter()
    first, second = samples(n), samples(n)  # two iterators in lockstep: the same sample, also of an IterableDataset
    while len(items) < n and time.perf_counter() - start < budget_s:
        t0 = time.perf_counter()
        try:
            item = next(first)
        except StopIteration:
            break
        t1 = time.perf_counter()
        torch.set_num_threads(1)
        try:
            next(second, None)
        finally:
            torch.set_num_threads(threads)
        t2 = time.perf_counter()
        items.append(item)
        many, one = many + (t1 - t0), one + (t2 - t1)
    return items, many, one


def _collate(collate: Callable[[list[Any]], Any], items: list[Any], batch_size: int) -> tuple[int, float]:
    """(full batches collated, wall seconds)."""
    batches = [items[i:i + batch_size] for i in range(0, len(items) - batch_size + 1, batch_size)]
    start = time.perf_counter()
    for batch in batches:
        collate(batch)
    return len(batches), time.perf_counter() - start


def _function_name(key: tuple[str, int, str]) -> str:
    """pstats's (file, line, name) as "parent/file.py:42(name)"; built-ins as pstats writes them."""
    filename, line, name = key
    if filename == "~" and line == 0:
        return "{" + name.removeprefix("<").removesuffix(">") + "}"
    parts = Path(filename).parts
    return f"{'/'.join(parts[-2:]) if len(parts) > 1 else filename}:{line}({name})"


def _own(key: tuple[str, int, str]) -> bool:
    """The profiler's bookkeeping and this module's loop: not the Dataset's time."""
    filename, _, name = key
    return filename == _HERE or "_lsprof.Profiler" in name


def _top(stats: pstats.Stats, top: int) -> list[ProfiledFunction]:
    """The ``top`` functions by self time, with their share of all the profiled time (bookkeeping left out)."""
    raw: dict[tuple[str, int, str], tuple[int, int, float, float, Any]] = stats.stats  # type: ignore[attr-defined]
    rows = [(key, v) for key, v in raw.items() if not _own(key)]
    total = sum(v[2] for _, v in rows)
    rows.sort(key=lambda kv: kv[1][2], reverse=True)
    return [ProfiledFunction(function=_function_name(key)[:1000], calls=int(calls), self_s=float(tottime),
                             cumulative_s=float(cumtime), self_share=min(tottime / total, 1.0) if total > 0 else 0.0)
            for key, (_, calls, tottime, cumtime, _) in rows[:top]]


def profile_dataset(dataset: Any, *, batch_size: int, collate_fn: Callable[[list[Any]], Any] | None = None,
                    samples: int = SAMPLES, budget_s: float = BUDGET_S, top: int = TOP) -> DatasetProfile:
    """The three passes of docs/measurement.md over the first ``samples`` samples of ``dataset``."""
    kind = "iterable" if isinstance(dataset, torch.utils.data.IterableDataset) else "map"
    collate = collate_fn or torch.utils.data.default_collate
    source = _samples(dataset, samples)
    threads = torch.get_num_threads()
    _load(source, WARMUP, budget_s)  # first calls pay one-time costs (lazy init, FFT plans, file caches)
    # Passes 1 and 2, interleaved sample by sample: the main process's cost (its torch threads) and a DataLoader
    # worker's (one torch thread). They also fix how many samples the profiled pass loads.
    if threads > 1:
        items, wall, one_wall = _paired(source, samples, threads, budget_s)
    else:
        items, wall = _load(source, samples, budget_s)
        one_wall = wall
    if not items:
        raise ValueError("the Dataset yielded no sample")
    n = len(items)
    one_thread = one_wall / n
    batches, collate_wall = _collate(collate, items, batch_size)
    # Pass 3: the same samples and batches under cProfile, for the shares.
    profiler = cProfile.Profile()
    start = time.perf_counter()
    profiler.enable()
    try:
        profiled, _ = _load(source, n, None)
        _collate(collate, profiled, batch_size)
    finally:
        profiler.disable()
    profiled_s = time.perf_counter() - start
    functions = _top(pstats.Stats(profiler), top)
    what = "samples" if kind == "map" else "items of the IterableDataset"
    method = (f"{n} {what} loaded in the trial process (no workers): timed on {threads} torch thread(s) and on 1 "
              f"(as a DataLoader worker), interleaved sample by sample, then under cProfile with {batches} collate call(s) of {batch_size}; "
              "shares are cProfile self time (its overhead inflates Python-heavy code)")
    return DatasetProfile(kind=kind, samples=n, batch_size=batch_size, getitem_s=wall / n, threads=threads,
                          getitem_one_thread_s=one_thread, collate_s=collate_wall / batches if batches else None,
                          profiled_s=profiled_s, top=functions, method=method)
