"""perfscope's trace facts beside an independent count and HTA's analyses, on the real public GPU traces.

    PERFSCOPE_PUBLIC_TRACES=DIR python benchmarks/public_trace_agreement.py

Prints one row per trace (tests/test_public_traces.py asserts the agreement; this shows the figures): steps, step
time, GPU busy share (perfscope / independent raw count / HTA), communication share of device time (perfscope /
HTA), communication hidden by other work (perfscope / HTA), waits on the device per step, and the time to analyse
the file. The traces come from tests/public_traces.py's folder (see scripts/public_traces.py).
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from perfscope.trace.communication import communication_facts  # noqa: E402
from perfscope.trace.facts import trace_facts  # noqa: E402
from tests.public_traces import TRACES, root  # noqa: E402
from tests.test_public_traces import GPU_TRAINING, hta_figures, raw_count  # noqa: E402


def main() -> int:
    missing = [n for n in GPU_TRAINING if not (root() / TRACES[n].path).is_file()]
    if missing:
        print(f"public traces not found under {root()}: {', '.join(missing)} (see scripts/public_traces.py)", file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="hta-"))
    print(f"{'trace':44} {'steps':>5} {'step ms':>8} {'busy% ps/raw/HTA':>18} {'comm% ps/HTA':>13} "
          f"{'hidden% ps/HTA':>15} {'waits/step':>10} {'secs':>5}")
    for name in GPU_TRAINING:
        path = root() / TRACES[name].path
        t0 = time.perf_counter()
        facts = trace_facts(path, device_type="cuda", steps=1)
        comm = communication_facts(path, rank=0, device_type="cuda", steps=1, world_size=2)
        seconds = time.perf_counter() - t0
        raw, hta = raw_count(path), hta_figures(name, tmp)
        time_by = facts.kernels.time_by_category
        ours_comm = time_by.get("communication", 0.0) / sum(time_by.values())
        hidden = f"{100 * comm.overlap_share:5.1f}/{100 * hta.overlap_share:5.1f}" if hta.overlap_share is not None else "-"
        print(f"{name[:44]:44} {facts.steps:5d} {facts.step_time_s * 1e3:8.1f} "
              f"{100 * facts.gpu.busy_fraction:5.1f}/{100 * raw.busy_share:5.1f}/{100 * hta.busy_share:5.1f} "
              f"{100 * ours_comm:6.1f}/{100 * hta.share_by_type.get('COMMUNICATION', 0.0):5.1f} {hidden:>15} "
              f"{facts.sync.points_per_step:10.1f} {seconds:5.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
