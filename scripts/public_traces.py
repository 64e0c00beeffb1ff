"""Copy the real public GPU traces the tests read (tests/public_traces.py) out of a clone of HTA, verified.

    python scripts/public_traces.py --from-git /path/to/HolisticTraceAnalysis [--to ../shared/public-traces/hta]

Reads each file at the pinned commit with `git show` (the clone needs no work tree), checks its sha256 against the
manifest and writes it under the layout of HTA's tests/data. Nothing is downloaded: run it where a clone exists.
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.public_traces import HTA_COMMIT, TRACES, root  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from-git", required=True, type=Path, help="a clone (or bare git directory) of HTA")
    parser.add_argument("--to", type=Path, default=None, help="target folder (default: the tests' folder)")
    args = parser.parse_args()
    target = args.to or root()
    for trace in TRACES.values():
        blob = subprocess.run(["git", "-C", str(args.from_git), "show", f"{HTA_COMMIT}:tests/data/{trace.path}"],
                              capture_output=True, check=False)
        if blob.returncode != 0:
            print(f"public_traces: {trace.path}: {blob.stderr.decode().strip()}", file=sys.stderr)
            return 2
        if hashlib.sha256(blob.stdout).hexdigest() != trace.sha256:
            print(f"public_traces: {trace.path}: digest differs from the manifest", file=sys.stderr)
            return 2
        out = target / trace.path
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(blob.stdout)
        print(f"{out}  {len(blob.stdout) // 1024} KiB  {trace.what}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
