"""The Dataset's own cost: a short profiled pass in the trial process when the step waits for data, stored in
results.json and shown next to the data-loader finding."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import torch

from perfscope.measure.dataset_profile import profile_dataset
from perfscope.results import DatasetProfile, Results, ResultsError
from tests.factories import contended, make_results, make_trial

WORKLOADS = Path(__file__).parent / "workloads"


def _slow_transform(x: torch.Tensor) -> torch.Tensor:
    time.sleep(0.002)
    for _ in range(20_000):  # its own Python work (~0.5 ms of self time a call): far above the collate helpers', so
        pass  # its place in the top 12 does not hang on where a loaded machine's preemptions land
    return x * 2


class Squares(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 100

    def __getitem__(self, i: int):
        return _slow_transform(torch.full((4,), float(i))), i


class Stream(torch.utils.data.IterableDataset):
    def __iter__(self):
        for i in range(1000):
            yield _slow_transform(torch.full((4,), float(i))), i


def test_profile_times_samples_and_collate_and_names_the_hot_functions():
    # A budget that cannot bind: the sample count is the claim here, not how many a loaded machine reads in 2 s.
    profile = profile_dataset(Squares(), batch_size=8, samples=16, budget_s=600)
    assert profile.kind == "map" and profile.samples == 16 and profile.batch_size == 8
    assert profile.getitem_s >= 0.002 and profile.getitem_one_thread_s >= 0.002  # the sleep is in every sample
    assert profile.collate_s is not None and profile.batch_s == pytest.approx(profile.getitem_s * 8 + profile.collate_s)
    top = [f.function for f in profile.top]
    assert any("time.sleep" in f for f in top) and any("_slow_transform" in f for f in top)
    assert profile.top == sorted(profile.top, key=lambda f: -f.self_s)
    assert not any("measure/dataset_profile.py" in f or "_lsprof" in f for f in top)  # the profiler's own loop left out
    labels = [f.label for f in profile.top]
    assert "time.sleep" in labels and any(x.startswith("_slow_transform (") for x in labels)
    assert 0.5 < sum(f.self_share for f in profile.top) <= 1.0 + 1e-9


class _SimTime:
    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


def test_profile_stops_at_its_time_budget_and_reads_iterable_datasets(monkeypatch):
    # On a simulated clock each item costs exactly 2 ms, so where the 50 ms budget stops the passes is the same on
    # any machine (with real sleeps a loaded machine could spend the budget before the first batch of 4).
    from perfscope.measure import dataset_profile

    sim = _SimTime()
    monkeypatch.setattr(dataset_profile, "time", sim)

    class SimStream(torch.utils.data.IterableDataset):
        def __iter__(self):
            for i in range(1000):
                sim.now += 0.002
                yield torch.full((4,), float(i)), i

    profile = dataset_profile.profile_dataset(SimStream(), batch_size=4, samples=1000, budget_s=0.05)
    assert profile.kind == "iterable" and 4 <= profile.samples <= 0.05 / 0.002 + 1, profile.samples
    assert profile.getitem_s == pytest.approx(0.002)


def test_profile_of_an_empty_dataset_is_an_error():
    with pytest.raises(ValueError):
        profile_dataset([], batch_size=4)


def test_profile_round_trips_through_results_json_and_older_files_load_without_it(tmp_path):
    results = make_results([make_trial()])
    results.trials[0].metrics.dataset_profile = profile_dataset(Squares(), batch_size=8, samples=8, budget_s=600)
    loaded = Results.load(results.save(tmp_path / "results.json"))
    profile = loaded.trials[0].metrics.dataset_profile
    assert isinstance(profile, DatasetProfile) and profile == results.trials[0].metrics.dataset_profile
    older = results.to_dict()
    del older["trials"][0]["metrics"]["dataset_profile"]  # written before the field existed
    assert Results.from_dict(older).trials[0].metrics.dataset_profile is None
    bad = results.to_dict()
    bad["trials"][0]["metrics"]["dataset_profile"]["top"][0]["self_share"] = 1.5
    with pytest.raises(ResultsError, match=r"dataset_profile\.top\[0\]\.self_share"):
        Results.from_dict(bad)


def test_the_profile_belongs_to_the_configuration_when_its_run_was_excluded():
    """Under load the profiled first run is excluded as contended and a retry, which may not have profiled, becomes the
    baseline's representative: the rule and the report still show where the Dataset spends its time."""
    from perfscope.report.markdown import render_markdown
    from perfscope.rules import run_rules

    profiled = make_trial("baseline", data_wait_fraction=0.6)
    profiled.metrics.dataset_profile = profile_dataset(Squares(), batch_size=8, samples=8, budget_s=600)
    profiled.excluded = contended(1.4)
    retry = make_trial("baseline-r2", data_wait_fraction=0.6, seed=1)
    retry.configuration, retry.repeat, retry.sequence, profiled.sequence = "baseline", 2, 2, 1
    results = make_results([profiled, retry], device_type="cpu")
    results.findings = run_rules(results)
    (finding,) = [f for f in results.findings if f.rule_id == "PS201"]
    assert any("where __getitem__ and collate spend their time" in e for e in finding.evidence)
    md = render_markdown(results)
    assert "Where \\_\\_getitem\\_\\_ and collate" in md or "Where __getitem__ and collate" in md


@pytest.mark.slow
def test_analyze_profiles_the_dataset_in_a_trial_process_and_the_report_shows_it(tmp_path, monkeypatch):
    from perfscope.cli import main
    from perfscope.report.markdown import render_markdown

    pids = tmp_path / "pids"
    pids.mkdir()
    monkeypatch.setenv("PERFSCOPE_TEST_PID_DIR", str(pids))
    code = main(["analyze", str(WORKLOADS / "slow_dataset.py"), "--device", "cpu", "--out", str(tmp_path / "out"),
                 "--no-sweep", "--steps", "6", "--warmup", "1"])
    assert code == 0
    assert os.getpid() not in {int(p.stem) for p in pids.glob("*.pid")}  # the parent never built the Dataset
    results = Results.load(tmp_path / "out" / "results.json")
    profile = results.trial("baseline").metrics.dataset_profile
    assert profile is not None and profile.getitem_s >= 0.003
    assert any("decode" in f.function for f in profile.top) and any("sleep" in f.function for f in profile.top)
    (finding,) = [f for f in results.findings if f.rule_id == "PS201"]
    assert finding.addresses == ["data_wait"] and any("where __getitem__ and collate spend their time" in e for e in finding.evidence)
    md = render_markdown(results)
    assert "Where \\_\\_getitem\\_\\_ and collate" in md or "Where __getitem__ and collate" in md
    assert "decode (" in md
