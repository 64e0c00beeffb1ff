"""The one reader of a trace file: its events streamed one at a time, every failure one line saying where.

Design notes: docs/trace.md."""

from __future__ import annotations

import gzip
import json
import math
import re
import zlib
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from perfscope.errors import UserError
from perfscope.results.messages import Message, msg

CHUNK = 1 << 18
"""Characters read at a time (and so the most text parsed in one batch: orjson's scratch memory is ~16x its input); a
value that does not fit is retried with a buffer twice as long."""
ERROR_MARGIN = 4 << 20
"""A decode error this far before the end of the buffer is in the file, not at the edge of what was read so far
(the longest token of a trace, a kernel name or a call stack, is far shorter)."""
ENDS_EARLY = "the file ends before the JSON does: cut short?"
_SPACE = re.compile(r"[ \t\n\r]*")
_SCAN = json.JSONDecoder().scan_once
"""The C scanner behind json.loads and raw_decode, called directly: one call per event."""
try:
    from orjson import loads as _LOADS
except ImportError:  # a dependency (pyproject.toml); the standard library's parser reads batches too, slower
    _LOADS = json.loads
BATCH_FAILURES = 8
"""Batches that did not parse before a file is read one event at a time (a writer whose events nest "},{")."""


class BadEvent(Exception):
    """Raised by a batch callback: the item at ``index`` of the batch could not be read (``cause``: why)."""

    def __init__(self, index: int, cause: Exception) -> None:
        super().__init__(str(cause))
        self.index, self.cause = index, cause


class _Broken(Exception):
    """Where and why the JSON is broken: turned into the UserError naming the file."""

    def __init__(self, msg: str, pos: int) -> None:
        super().__init__(msg)
        self.msg, self.pos = msg, pos


class _Buffer:
    """A window on the text of the file: ``buf[i:]`` is unread; what was dropped is counted for line numbers."""

    def __init__(self, fh: IO[str]) -> None:
        self.fh, self.buf, self.i, self.eof = fh, "", 0, False
        self.line, self.column = 1, 1
        """Line and column of buf[0]."""

    def fill(self, size: int = CHUNK) -> bool:
        """Read more text after the unread part; False at the end of the file."""
        if self.eof:
            return False
        more = self.fh.read(max(size, CHUNK))
        if not more:
            self.eof = True
            return False
        self._drop()
        self.buf += more
        return True

    def _drop(self) -> None:
        done = self.buf[:self.i]
        newlines = done.count("\n")
        if newlines:
            self.line += newlines
            self.column = len(done) - done.rfind("\n")
        else:
            self.column += len(done)
        self.buf, self.i = self.buf[self.i:], 0

    def where(self, pos: int) -> tuple[int, int]:
        """(line, column) of buf[pos], both from 1."""
        newlines = self.buf.count("\n", 0, pos)
        if not newlines:
            return self.line, self.column + pos
        return self.line + newlines, pos - self.buf.rfind("\n", 0, pos)

    def peek(self) -> str:
        """The next character that is not white space ("" at the end of the file), not consumed."""
        while True:
            self.i = _SPACE.match(self.buf, self.i).end()  # type: ignore[union-attr]
            if self.i < len(self.buf):
                return self.buf[self.i]
            if not self.fill():
                return ""

    def expect(self, char: str, what: str) -> None:
        found = self.peek()
        if found != char:
            raise _Broken(f"Expecting {what}" if found else ENDS_EARLY, self.i)
        self.i += 1

    def value(self) -> Any:
        """The next JSON value, consumed; retried on more text while the error may be the buffer's edge."""
        self.peek()
        while True:
            try:
                try:
                    obj, end = _SCAN(self.buf, self.i)
                except StopIteration as stop:
                    raise json.JSONDecodeError("Expecting value", self.buf, stop.value) from None
            except json.JSONDecodeError as exc:
                if self.eof or exc.pos + ERROR_MARGIN < len(self.buf):
                    cut = self.eof and (exc.pos >= len(self.buf) - 1 or exc.msg.startswith("Unterminated string"))
                    raise _Broken(ENDS_EARLY if cut else exc.msg, exc.pos) from None
                self.fill(len(self.buf) - self.i)  # doubles only for a value longer than the buffer
                continue
            if end == len(self.buf) and not self.eof and self.fill():
                continue  # a number or literal may go on in the next chunk
            self.i = end
            return obj


def stream_trace(path: Path, on_batch: Callable[[list[Any]], None]) -> dict[str, Any]:
    """Call ``on_batch`` with the items of the trace's traceEvents (a bare top-level list is the events), a parsed
    batch at a time (a list, in file order: one Python call per ~1000 events); it raises BadEvent(index, cause) for
    an item it cannot read. Return the other top-level keys; UserError, naming the file, on anything that is not a
    readable trace."""
    path = Path(path)
    try:
        if path.stat().st_size == 0:
            raise UserError(f"{path}: an empty file (0 bytes), not a Kineto trace")
        opener = gzip.open if path.name.endswith(".gz") else open
        with opener(path, "rt", encoding="utf-8") as fh:  # type: ignore[operator]
            reader = _Buffer(fh)
            try:
                return _top_level(path, reader, on_batch)
            except _Broken as exc:
                line, column = reader.where(exc.pos)
                raise UserError(f"{path}: not JSON ({exc.msg} at line {line}, column {column})") from None
    except EOFError:
        raise UserError(f"{path}: a truncated gzip file (it ends before the end of its compressed stream)") from None
    except (gzip.BadGzipFile, zlib.error) as exc:
        raise UserError(f"{path}: not a valid gzip file ({exc})") from None
    except UnicodeDecodeError:
        raise UserError(f"{path}: not UTF-8 text, so not a JSON trace") from None
    except RecursionError:
        raise UserError(f"{path}: JSON nested too deeply to be a trace") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read it: {exc.strerror or exc}") from None


def _top_level(path: Path, reader: _Buffer, on_batch: Callable[[list[Any]], None]) -> dict[str, Any]:
    first = reader.peek()
    if first == "[":
        _events(path, reader, on_batch)
        _end(reader)
        return {}
    if first != "{":
        found = reader.value()  # raises when it is not JSON at all
        raise UserError(f"{path}: JSON of another shape, not a Kineto trace: no traceEvents list (found: {type(found).__name__})")
    reader.i += 1
    metadata: dict[str, Any] = {}
    streamed = False
    if reader.peek() == "}":
        reader.i += 1
    else:
        while True:
            if reader.peek() != '"':
                raise _Broken("Expecting property name enclosed in double quotes", reader.i)
            key = reader.value()
            reader.expect(":", "':' delimiter")
            if key == "traceEvents" and reader.peek() == "[":
                _events(path, reader, on_batch)
                streamed = True
            else:
                metadata[key] = reader.value()
            if reader.peek() == ",":
                reader.i += 1
                continue
            reader.expect("}", "',' delimiter")
            break
    _end(reader)
    if not streamed:
        keys = ", ".join(list(metadata)[:5])
        raise UserError(f"{path}: JSON of another shape, not a Kineto trace: no traceEvents list "
                        f"(found: {keys or 'an empty object'})")
    return metadata


def _events(path: Path, reader: _Buffer, on_batch: Callable[[list[Any]], None]) -> None:
    """The traceEvents array, its opening bracket next: each batch to ``on_batch`` as soon as it is read."""
    reader.i += 1
    if reader.peek() == "]":
        reader.i += 1
        return
    failures = 0
    while True:
        if failures < BATCH_FAILURES:
            batch, cut = _batch(reader)
            if batch is not None:
                _deliver(path, reader, batch, on_batch)
                reader.i = cut + 2  # past the "},"
                continue
            failures += cut >= 0
        _deliver(path, reader, [reader.value()], on_batch)
        char = reader.peek()
        if char == ",":
            reader.i += 1
        elif char == "]":
            reader.i += 1
            return
        elif char == "":
            raise _Broken(ENDS_EARLY, reader.i)
        else:
            raise _Broken("Expecting ',' delimiter", reader.i)


def _batch(reader: _Buffer) -> tuple[list[Any] | None, int]:
    """Every whole event from the read position to the last event boundary ("}," then "{") in the buffer, parsed in
    one call; (None, -1) when the buffer holds no boundary, (None, cut) when the text up to it did not parse."""
    buf, start = reader.buf, reader.i
    cut = buf.rfind("},", start)
    while cut > start:
        after = _SPACE.match(buf, cut + 2).end()  # type: ignore[union-attr]
        if after < len(buf) and buf[after] == "{":
            break
        cut = buf.rfind("},", start, cut)
    if cut <= start:
        return None, -1
    try:
        batch = _LOADS("[" + buf[start:cut + 1] + "]")
    except (ValueError, RecursionError):  # orjson.JSONDecodeError and json.JSONDecodeError are ValueErrors
        return None, cut
    return batch, cut


def _deliver(path: Path, reader: _Buffer, items: list[Any], on_batch: Callable[[list[Any]], None]) -> None:
    """The batch to ``on_batch``; an item it cannot read is named by its line: the items of the batch before it are
    stepped over again (without being delivered twice) to find where it ends."""
    try:
        on_batch(items)
    except BadEvent as bad:
        if len(items) > 1:
            for _ in range(bad.index):
                reader.value()
                reader.expect(",", "',' delimiter")
            reader.value()
        line, _ = reader.where(reader.i)
        raise UserError(f"{path}: a malformed trace event (at line {line}: {type(bad.cause).__name__}: {bad.cause})") from None


def _end(reader: _Buffer) -> None:
    if reader.peek():
        raise _Broken("Extra data", reader.i)


MAX_DURATION_US = 86_400e6
"""A complete event longer than a day is a broken record (a 1e300 µs kernel), not something that ran."""


def why_broken(ts: float, dur: float) -> str:
    """Why a complete event's times are unusable, in a reader's words."""
    if math.isnan(ts) or math.isnan(dur):
        return "a NaN timestamp or duration"
    if math.isinf(ts) or math.isinf(dur):
        return "an infinite timestamp or duration"
    return "a negative duration" if dur < 0 else "a duration longer than a day"


def unusable_note(unusable: Counter[str]) -> Message | None:
    """How many events were skipped and why (most common first); None when none were."""
    return msg("unusable_events", counts=dict(unusable.most_common())) if sum(unusable.values()) else None


__all__ = ["MAX_DURATION_US", "BadEvent", "stream_trace", "unusable_note", "why_broken"]
