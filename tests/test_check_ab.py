"""`perfscope ab`: the baseline revision and the candidate measured interleaved in one job, decided on paired runs."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest

from perfscope.check.paired import decide_paired
from perfscope.cli import main
from perfscope.results import Gain, Results
from perfscope.search.compare import compare

WORKLOADS = Path(__file__).resolve().parent / "workloads"
EXTRA_FLOPS = 8 * 2 * 160**3
"""tests/workloads/ab_slower.py's extra work per step: 8 matmuls of 160×160 by 160×160, 2·m·k·n FLOPs each."""
RUN = ["--device", "cpu", "--rounds", "3", "--min-window", "0.2", "--warmup", "2", "--trial-timeout", "120"]


def gain(ratio, low, high, *, runs=5, mde=0.03):
    return Gain(ratio=ratio, low=low, high=high, confidence=0.99, runs=runs, reference_runs=runs + 1, mde=mde)


@pytest.mark.parametrize("g, status", [
    (gain(0.80, 0.75, 0.85), "regression"),  # past the tolerance, the whole interval below 1
    (gain(0.90, 0.70, 1.10), "inconclusive"),  # past the tolerance, the interval reaches 1
    (gain(0.99, 0.96, 1.02), "pass"),
    (gain(1.20, 1.10, 1.30), "pass"),  # faster
    (gain(0.80, 0.0, math.inf, runs=1, mde=None), "inconclusive"),  # one run each: no interval
    (None, "inconclusive"),  # nothing counted as evidence
])
def test_the_paired_decision(g, status):
    verdict = decide_paired(g, max_drop=0.05)
    assert verdict.status == status, verdict.message


def test_a_pass_that_could_not_resolve_the_tolerance_says_so():
    verdict = decide_paired(gain(0.99, 0.85, 1.15, mde=0.2), max_drop=0.05)
    assert verdict.status == "pass" and "could pass unseen" in verdict.warnings[0]


def test_the_same_file_twice_or_one_round_is_refused(tmp_path, capsys):
    mlp = str(WORKLOADS / "mlp.py")
    assert main(["ab", mlp, mlp, "--out", str(tmp_path / "o")]) == 2
    assert "same file" in capsys.readouterr().err
    assert main(["ab", mlp, str(WORKLOADS / "ab_slower.py"), "--rounds", "1", "--out", str(tmp_path / "o")]) == 2
    assert not (tmp_path / "o" / "baseline").exists()


def _sides(out: Path) -> tuple[Results, Results]:
    return Results.load(out / "baseline" / "results.json"), Results.load(out / "candidate" / "results.json")


def _assert_interleaved(out: Path) -> None:
    base, cand = _sides(out)
    order = sorted([(t.sequence, "B") for t in base.trials] + [(t.sequence, "C") for t in cand.trials])
    assert len({s for s, _ in order}) == len(order)  # one measurement order across both files
    measured = "".join(side for _, side in order)
    collapsed = "".join(side for i, side in enumerate(measured) if i == 0 or measured[i - 1] != side)
    assert collapsed == "BCBCBCB", measured  # B, then C B per round (a contended run is measured again at once)


def _owed_exit(out: Path) -> int:
    """The exit code `ab` owes the runs it wrote: the paired decision recomputed from its two files."""
    base, cand = _sides(out)
    verdict = decide_paired(compare(cand.runs("candidate"), base.runs("baseline"), reference="baseline"), max_drop=0.05)
    return {"pass": 0, "regression": 1, "inconclusive": 3}[verdict.status]


def _counted(out: Path) -> list[set[float | None]]:
    """Each side's FLOPs per step over its successful runs: counted under a dispatch mode, so load cannot move it."""
    return [{t.metrics.flops_per_step for t in r.trials if t.ok} for r in _sides(out)]


@pytest.mark.slow
def test_ab_runs_for_real_decide_on_their_runs_and_count_the_extra_work(tmp_path, monkeypatch, capsys):
    """Real runs of tiny CPU workloads, decided on what load cannot move: the exit code is the paired decision on
    the runs `ab` wrote (whatever they measured), identical code counts identical work and no structural change,
    and the slower candidate's extra work is counted exactly. How often identical code would be called a regression
    on wall time is the paired test's false-positive rate, held by tests/test_stat_simulation.py on simulated runs
    (here, on a loaded machine, a real identical pair was once -32% with every run counted)."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    same = tmp_path / "mlp_at_candidate.py"
    shutil.copyfile(WORKLOADS / "mlp.py", same)
    code = main(["ab", str(WORKLOADS / "mlp.py"), str(same), "--out", str(tmp_path / "same"), *RUN])
    out = capsys.readouterr().out
    assert code == _owed_exit(tmp_path / "same"), out
    assert "interleaved" in out and "no structural change" in out, out
    _assert_interleaved(tmp_path / "same")
    base_flops, same_flops = _counted(tmp_path / "same")
    assert len(base_flops) == 1 and base_flops == same_flops, (base_flops, same_flops)

    code = main(["ab", str(WORKLOADS / "mlp.py"), str(WORKLOADS / "ab_slower.py"), "--out", str(tmp_path / "slow"), *RUN])
    out = capsys.readouterr().out
    assert code == _owed_exit(tmp_path / "slow"), out
    base, cand = _sides(tmp_path / "slow")
    # The extra work, shown by what load cannot move: each side's step counted under a dispatch mode (FLOPs, ops),
    # the same in every run of a side, and the candidate's larger by exactly its 8 extra 160×160×160 matmuls.
    # (How much slower that makes it in wall time is a benchmark's figure, not a test's.)
    flops = _counted(tmp_path / "slow")
    assert all(len(side) == 1 for side in flops), flops  # one count per side, whatever the load
    (base_flops,), (cand_flops,) = flops
    assert cand_flops - base_flops == EXTRA_FLOPS, flops
    mm = [{t.metrics.fingerprint.ops.get("aten::mm", 0) for t in r.trials if t.ok and t.metrics.fingerprint} for r in (base, cand)]
    assert all(len(side) == 1 for side in mm), mm
    (base_mm,), (cand_mm,) = mm
    assert cand_mm - base_mm == 8, mm  # the 8 extra calls, counted
