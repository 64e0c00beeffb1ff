"""`perfscope ab`: the baseline revision and the candidate measured interleaved in one job, decided on paired runs."""

from __future__ import annotations

import math
import random
import re
import shutil
from pathlib import Path

import pytest

from perfscope.ab import WARMUP, measurement_order
from perfscope.check.decision import decide_paired, rounds_for_power
from perfscope.cli import main
from perfscope.results import Results, msg
from perfscope.search.compare import PairedTest, paired_test

WORKLOADS = Path(__file__).resolve().parent / "workloads"
EXTRA_FLOPS = 8 * 2 * 160**3
"""tests/workloads/ab_slower.py's extra work per step: 8 matmuls of 160×160 by 160×160, 2·m·k·n FLOPs each."""
RUN = ["--device", "cpu", "--rounds", "3", "--min-window", "0.2", "--warmup", "2", "--trial-timeout", "120"]


def paired(ratio, se, *, runs=8, df=10.0):
    return PairedTest(mean=math.log(ratio), se=se, df=df, runs=runs, reference_runs=runs)


@pytest.mark.parametrize("test, status", [
    (paired(0.80, 0.02), "regression"),  # past the tolerance, the whole interval below 1
    (paired(0.90, 0.08), "inconclusive"),  # past the tolerance, the interval reaches 1
    (paired(0.99, 0.01), "pass"),  # the interval excludes a 5% drop
    (paired(0.99, 0.04), "inconclusive"),  # identical code, but a 5% drop is not excluded: no pass
    (paired(1.20, 0.02), "pass"),  # faster
    (paired(0.80, math.inf, runs=1, df=0.0), "inconclusive"),  # one run each: no interval
    (None, "inconclusive"),  # nothing counted as evidence
])
def test_the_paired_decision(test, status):
    verdict = decide_paired(test, max_drop=0.05)
    assert verdict.status == status, verdict.message


def test_the_verdict_states_its_power_and_the_rounds_that_reach_80_percent():
    """se 2.5% on 5 rounds: a 5% drop (log 0.051) is 2 se away: power well under 80%; rounds ∝ se²."""
    test = paired(1.0, 0.025, runs=5, df=8.0)
    verdict = decide_paired(test, max_drop=0.05)
    assert verdict.power is not None and 0.2 < verdict.power < 0.6
    needed = rounds_for_power(test, 0.05)
    assert needed == math.ceil(5 * (0.025 * (1.959964 + 0.841621) / -math.log(0.95)) ** 2)
    power = verdict.message.params["runs"].params["power"]
    assert power == msg("power_at_tolerance", max_drop=0.05, power=verdict.power, needed=needed, target=0.8)
    quiet = decide_paired(paired(1.0, 0.005, runs=5, df=8.0), max_drop=0.05)
    assert quiet.power > 0.99 and quiet.message.params["runs"].params["power"].params["needed"] is None


def test_each_round_runs_both_revisions_in_a_random_order_after_a_discarded_warmup():
    """The baseline always first handed its warm-up penalty to the candidate (issue 35); each round is now a random
    pair, the first one discarded, and the order is fixed by the seed."""
    order = measurement_order(40, seed=3)
    assert order[:2] == [(order[0][0], True), (order[1][0], True)] and not any(w for _, w in order[2:])
    pairs = [tuple(n for n, _ in order[i:i + 2]) for i in range(0, len(order), 2)]
    assert all(set(p) == {"baseline", "candidate"} for p in pairs)
    firsts = [p[0] for p in pairs]
    assert 10 < firsts.count("baseline") < 31  # both orders occur (binomial(41, 1/2): outside 11-30 has p < 0.01)
    assert measurement_order(40, seed=3) == order and measurement_order(40, seed=4) != order


def test_the_same_file_twice_or_one_round_is_refused(tmp_path, capsys):
    mlp = str(WORKLOADS / "mlp.py")
    assert main(["ab", mlp, mlp, "--out", str(tmp_path / "o")]) == 2
    assert "same file" in capsys.readouterr().err
    assert main(["ab", mlp, str(WORKLOADS / "ab_slower.py"), "--rounds", "1", "--out", str(tmp_path / "o")]) == 2
    assert not (tmp_path / "o" / "baseline").exists()


def _sides(out: Path) -> tuple[Results, Results]:
    return Results.load(out / "baseline" / "results.json"), Results.load(out / "candidate" / "results.json")


def _assert_interleaved(out: Path, printed: str) -> None:
    base, cand = _sides(out)
    order = sorted([(t.sequence, "B") for t in base.trials] + [(t.sequence, "C") for t in cand.trials])
    assert len({s for s, _ in order}) == len(order)  # one measurement order across both files
    for side in (base, cand):  # the first run of each revision is never evidence: the warm-up (or contended)
        first = min(side.trials, key=lambda t: t.sequence)
        assert first.excluded == WARMUP or first.contended, first.excluded
    pairs = re.search(r"order \(warm-up first, discarded\): ([BC ]+) \(--seed \d+\)", printed).group(1).split()
    assert len(pairs) == 4 and all(sorted(p) == ["B", "C"] for p in pairs)  # warm-up + --rounds 3, one of each


def _owed_exit(out: Path) -> int:
    """The exit code `ab` owes the runs it wrote: the paired decision recomputed from its two files."""
    base, cand = _sides(out)
    verdict = decide_paired(paired_test(cand.runs("candidate"), base.runs("baseline")), max_drop=0.05)
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
    _assert_interleaved(tmp_path / "same", out)
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


def _simulated_job(order, truth, seed, *, warmup_penalty, sd=0.03):
    """One `ab` job's verdict on simulated runs in ``order``: the job's first process pays ``warmup_penalty`` (log)."""
    from benchmarks.sweep_model import _trial
    from perfscope.results.config import TrialConfig

    rng, config = random.Random(seed), TrialConfig(device="cpu", micro_batch_size=8)
    runs = {"baseline": [], "candidate": []}
    for seq, (side, warmup) in enumerate(order, 1):
        slow = warmup_penalty if seq == 1 else 0.0
        trial = _trial(f"{side}{seq}", side, seq, seq, config, [],
                       100 * math.exp((truth if side == "candidate" else 0.0) - slow + rng.gauss(0, sd)))
        trial.excluded = WARMUP if warmup else None
        runs[side].append(trial)
    evidence = {side: [t for t in trials if t.evidence] for side, trials in runs.items()}
    return decide_paired(paired_test(evidence["candidate"], evidence["baseline"]), max_drop=0.05).status


def test_a_warmup_penalty_no_longer_hides_a_regression():
    """Issue 35: with the baseline always first, the job's slow first process lowered the baseline and hid a 10% drop
    (here 3% run noise, 8 rounds, a first process 26% slower: about 3 jobs in 4 caught); a discarded warm-up pair
    and a random order per round catch it in every job, as without the penalty."""
    old_order = [("baseline", False)] + [("candidate", False), ("baseline", False)] * 8
    old = [_simulated_job(old_order, math.log(0.9), s, warmup_penalty=0.3) for s in range(200)]
    new = [_simulated_job(measurement_order(8, s), math.log(0.9), s, warmup_penalty=0.3) for s in range(200)]
    assert old.count("regression") < 170 and new.count("regression") >= 196, (old.count("regression"), new.count("regression"))
    same = [_simulated_job(measurement_order(8, s), 0.0, s, warmup_penalty=0.3) for s in range(200)]
    assert same.count("regression") <= 5 and same.count("pass") >= 160  # identical code passes at about its stated power (88% here)
