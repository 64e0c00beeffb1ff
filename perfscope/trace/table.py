"""The kept events of a trace as numpy columns: one table per kind (cpu ops, annotations, runtime calls, Python
frames, device work), filled in batches as the file streams.

Design notes: docs/trace.md."""

from __future__ import annotations

from typing import Any

import numpy as np

NONE = np.iinfo(np.int64).min
"""An id column's "absent" (correlation, External id)."""
FLUSH = 1 << 16
"""Rows appended to Python lists before they become numpy chunks."""


class Strings:
    """Interned values (names, categories, pid/tid values, args dicts): a value's id is its index."""

    def __init__(self) -> None:
        self.ids: dict[Any, int] = {}
        self.values: list[Any] = []

    def id(self, value: Any) -> int:
        i = self.ids.get(value)
        if i is None:
            i = self.ids[value] = len(self.values)
            self.values.append(value)
        return i


class Grower:
    """One kind's rows as they are read: a list of row tuples, turned into numpy column chunks every FLUSH rows."""

    COLUMNS = (("ts", np.float64), ("dur", np.float64), ("name", np.int32), ("cat", np.int32), ("pid", np.int32),
               ("tid", np.int32), ("corr", np.int64), ("ext", np.int64), ("args", np.int32))
    FLOWS = (("ts", np.float64), ("pid", np.int32), ("tid", np.int32), ("id", np.int64))
    """An ac2g flow's (pid, tid, ts) and id: the correlation of the event it starts or ends at."""

    def __init__(self, columns: tuple[tuple[str, Any], ...] = COLUMNS) -> None:
        self.COLUMNS = columns
        self.ROW = np.dtype(list(columns))
        self.rows: list[tuple[Any, ...]] = []
        self.chunks: list[list[np.ndarray]] = [[] for _ in self.COLUMNS]

    def flush(self) -> None:
        if not self.rows:
            return
        table = np.array(self.rows, dtype=self.ROW)
        self.rows.clear()
        for (key, _), chunks in zip(self.COLUMNS, self.chunks):
            chunks.append(np.ascontiguousarray(table[key]))

    def columns(self, order: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """The columns, each chunk list joined (and put in ``order``) one column at a time; a column holding one
        value throughout (no correlation ids on host ops, one category) is a constant view of it, no memory."""
        self.flush()
        out = {}
        for (key, dtype), chunks in zip(self.COLUMNS, self.chunks):
            column = np.concatenate(chunks) if chunks else np.empty(0, dtype)
            chunks.clear()
            if order is not None:
                column = column[order]
            if len(column) > 1 and column.dtype.kind != "f" and (column == column[0]).all():
                column = np.broadcast_to(column[:1].copy(), column.shape)
            out[key] = column
        return out

    def ts(self) -> np.ndarray:
        """The first column (start times) joined, the chunks kept."""
        self.flush()
        return np.concatenate(self.chunks[0]) if self.chunks[0] else np.empty(0)


class EventColumns:
    """One kind's events as columns; ``names``, ``cats``, ``values`` (pid/tid) and ``args`` are the shared tables
    the id columns index."""

    def __init__(self, cols: dict[str, np.ndarray], *, names: list[str], cats: list[str], values: list[Any],
                 args: list[dict[str, Any]]) -> None:
        self.ts: np.ndarray = cols["ts"]
        self.dur: np.ndarray = cols["dur"]
        self.name: np.ndarray = cols["name"]
        self.cat: np.ndarray = cols["cat"]
        self.pid: np.ndarray = cols["pid"]
        self.tid: np.ndarray = cols["tid"]
        self.corr: np.ndarray = cols["corr"]
        self.ext: np.ndarray = cols["ext"]
        self.args: np.ndarray = cols["args"]
        self.names, self.cats, self.values, self.arg_table = names, cats, values, args
        n = len(self.ts)

        def absent(key: str, value: Any, dtype: Any) -> np.ndarray:  # host tables: a constant view, no memory
            return cols[key] if key in cols else np.broadcast_to(np.array(value, dtype), (n,))

        self.launch_ts = absent("launch_ts", np.nan, np.float64)
        self.launch_dur = absent("launch_dur", np.nan, np.float64)
        self.launch_pid = absent("launch_pid", -1, np.int32)
        self.launch_tid = absent("launch_tid", -1, np.int32)
        self.launch_name = absent("launch_name", -1, np.int32)

    def __len__(self) -> int:
        return len(self.ts)

    @property
    def end(self) -> np.ndarray:
        return self.ts + self.dur

    @property
    def linked(self) -> np.ndarray:
        """Device work: whether its launch call is known."""
        return self.launch_name >= 0

    def thread(self) -> np.ndarray:
        """(pid, tid) as one int64 key."""
        return self.pid.astype(np.int64) << 32 | self.tid.astype(np.int64)

    def launch_thread(self) -> np.ndarray:
        return self.launch_pid.astype(np.int64) << 32 | self.launch_tid.astype(np.int64)

    def by_name(self, test: Any) -> np.ndarray:
        """Rows whose name passes ``test`` (called once per distinct name)."""
        if not len(self):
            return np.zeros(0, bool)
        used = np.unique(self.name)
        keep = np.zeros(int(used.max()) + 1, bool)
        keep[used] = [bool(test(self.names[i])) for i in used]
        return keep[self.name]

    def by_cat(self, *cats: str) -> np.ndarray:
        ids = [i for i, c in enumerate(self.cats) if c in cats]
        return np.isin(self.cat, ids)


def last_match(ids: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """For each of ``wanted``, the index of the last of ``ids`` equal to it (the latest in file order, as a dict keeps
    it); -1 for none and for NONE."""
    out = np.full(len(wanted), -1, np.int64)
    known = np.flatnonzero(ids != NONE)
    if not len(known) or not len(wanted):
        return out
    order = known[np.argsort(ids[known], kind="stable")]
    keys = ids[order]
    last = np.r_[keys[1:] != keys[:-1], True]  # the last of each run of equal ids
    keys, rows = keys[last], order[last]
    j = np.minimum(np.searchsorted(keys, wanted), len(keys) - 1)
    hit = (keys[j] == wanted) & (wanted != NONE)
    out[hit] = rows[j[hit]]
    return out


def ext_code(value: Any, exts: Strings) -> int:
    """An External id as an int64: ints as they are, anything else interned (codes just above NONE)."""
    if value is None:
        return NONE
    if value.__class__ is int and -(1 << 62) < value < (1 << 62):
        return value
    return NONE + 1 + exts.id(value)
