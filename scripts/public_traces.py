"""Copy the real public GPU traces the tests read (tests/public_traces.py) out of clones of their repositories, verified.

    python scripts/public_traces.py --from-git /path/to/HolisticTraceAnalysis [--from-git /path/to/kineto ...]
                                    [--to ../shared/public-traces/hta]

Each --from-git clone serves the traces of the repository it is a clone of (HTA, facebookresearch/param,
pytorch/kineto: told apart by its remote URL, else by which pinned commit it holds); traces of a repository no clone
was given for are skipped, said so.
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
from tests.public_traces import TRACES, root  # noqa: E402


def _holds(clone: Path, commit: str) -> bool:
    return subprocess.run(["git", "-C", str(clone), "cat-file", "-e", f"{commit}^{{commit}}"], capture_output=True,
                          check=False).returncode == 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from-git", required=True, type=Path, action="append",
                        help="a clone (or bare git directory) of HTA, param or kineto; repeat for several")
    parser.add_argument("--to", type=Path, default=None, help="target folder (default: the tests' folder)")
    args = parser.parse_args()
    target = args.to or root()
    for trace in TRACES.values():
        clone = next((c for c in args.from_git if _holds(c, trace.commit)), None)
        if clone is None:
            print(f"public_traces: {trace.path}: skipped, no clone of {trace.repository} holding {trace.commit[:10]} given")
            continue
        blob = subprocess.run(["git", "-C", str(clone), "show", f"{trace.commit}:{trace.source_path}"],
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
