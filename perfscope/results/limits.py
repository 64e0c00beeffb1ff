"""What a JSON document may be before perfscope parses it: size, encoding, nesting depth.

    data = parse_json(raw_bytes)        # ResultsError("not UTF-8 ...", "nested deeper than 64 ...", ...)

Design notes: docs/results.md.
"""

from __future__ import annotations

import json
import re
from typing import Any

from perfscope.errors import ResultsError

MAX_FILE_BYTES = 32 * 2**20
"""A long sweep writes a few MB (200,000 step times are 4 MB); 32 MiB leaves a wide margin and bounds the
parse to about a second."""
MAX_DEPTH = 64
"""Results files nest about 10 deep (results > trials > metrics > utilization > samples > ...); free-form
fields (trace facts, declared settings) get the rest."""

_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_CHUNK = 1 << 22


def check_size(size: int) -> None:
    if size > MAX_FILE_BYTES:
        raise ResultsError(f"file is {size / 2**20:,.1f} MiB, over the {MAX_FILE_BYTES / 2**20:,.0f} MiB limit for a results file")


def max_depth(data: bytes) -> int:
    """The deepest nesting of arrays and objects in JSON ``data`` (strings skipped), computed up to MAX_DEPTH + 1."""
    import numpy as np  # lazily: only readers of files pay for it

    brackets = _STRING.sub(b"", data).translate(None, _NOT_BRACKETS)
    depth = deepest = 0
    for start in range(0, len(brackets), _CHUNK):
        codes = np.frombuffer(brackets, dtype=np.uint8, count=min(_CHUNK, len(brackets) - start), offset=start)
        steps = np.where((codes == ord("[")) | (codes == ord("{")), 1, -1).astype(np.int64)
        running = depth + np.cumsum(steps)
        deepest = max(deepest, int(running.max()))
        depth = int(running[-1])
        if deepest > MAX_DEPTH:
            break
    return deepest


def parse_json(data: bytes) -> Any:
    """Check size, encoding and nesting, then parse. NaN and Infinity are parsed (as floats) so the model's
    validation can reject them naming the field (``trials[0].metrics.mfu: must be finite, got nan``)."""
    check_size(len(data))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ResultsError(f"not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); "
                           "results files are UTF-8 JSON") from None
    if max_depth(data) > MAX_DEPTH:
        raise ResultsError(f"JSON nested deeper than {MAX_DEPTH} levels; not a results file")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ResultsError(f"not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
    except (ValueError, RecursionError) as exc:  # e.g. an integer literal longer than Python converts
        raise ResultsError(f"not usable JSON: {str(exc).splitlines()[0][:200]}") from None
