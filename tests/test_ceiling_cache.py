"""The CPU matmul ceiling cache: measured once per key, re-measured when anything in the key changes or the
file is unusable, never read when disabled, written atomically, and its provenance reported."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest

from perfscope.measure import ceiling_cache
from perfscope.measure.ceiling_cache import CACHE_ENV, CeilingKey, cached_ceiling


class Probe:
    """A stand-in for the matmul probe that counts its calls."""

    def __init__(self, value: float = 1.25) -> None:
        self.calls, self.value = 0, value

    def __call__(self) -> float:
        self.calls += 1
        return self.value


KEY = CeilingKey(dtype="fp32", host="box", cpu_model="Test CPU", usable_cores=2.0, threads=2, torch_version="2.0")


def test_a_second_run_reads_the_cached_ceiling_and_says_so(tmp_path):
    path, probe = tmp_path / "c.json", Probe()
    first = cached_ceiling(KEY, probe, enabled=True, path=path)
    second = cached_ceiling(KEY, Probe(9.0), enabled=True, path=path)
    assert probe.calls == 1 and first[0] == second[0] == 1.25
    assert first[1].startswith("measured in this run at ") and "now cached" in first[1]
    assert second[1].startswith("measured on this machine at ") and "cached in" in second[1] and str(path) in second[1]


@pytest.mark.parametrize("change", [{"dtype": "bf16"}, {"threads": 1}, {"usable_cores": 1.0}, {"torch_version": "2.1"},
                                    {"cpu_model": "Other CPU"}, {"host": "other"}, {"method": ceiling_cache.METHOD + 1}])
def test_a_changed_key_is_measured_again_and_both_are_kept(tmp_path, change):
    path = tmp_path / "c.json"
    cached_ceiling(KEY, Probe(1.0), enabled=True, path=path)
    other, probe = dataclasses.replace(KEY, **change), Probe(2.0)
    assert cached_ceiling(other, probe, enabled=True, path=path)[0] == 2.0 and probe.calls == 1
    assert cached_ceiling(KEY, Probe(5.0), enabled=True, path=path)[0] == 1.0  # the first entry survives


def test_disabled_measures_every_time_and_never_touches_the_file(tmp_path, monkeypatch):
    path, probe = tmp_path / "c.json", Probe()
    for _ in range(2):
        assert cached_ceiling(KEY, probe, enabled=False, path=path) == (1.25, "measured in this run (ceiling cache off)")
    assert probe.calls == 2 and not path.exists()
    monkeypatch.setenv(CACHE_ENV, "0")
    cached_ceiling(KEY, probe, path=path)
    assert probe.calls == 3 and not path.exists()


@pytest.mark.parametrize("text", ["{not json", "", json.dumps([1, 2]), json.dumps({"format": 999, "entries": {}}),
                                  json.dumps({"format": 1, "entries": {KEY.id(): {"tflops": -1.0, "measured_at": "x"}}}),
                                  json.dumps({"format": 1, "entries": {KEY.id(): {"tflops": "fast", "measured_at": "x"}}}),
                                  json.dumps({"format": 1, "entries": {KEY.id(): {"tflops": 3.0}}})])
def test_a_corrupt_file_or_entry_is_measured_again_and_rewritten(tmp_path, text):
    path, probe = tmp_path / "c.json", Probe()
    path.write_text(text)
    assert cached_ceiling(KEY, probe, enabled=True, path=path)[0] == 1.25 and probe.calls == 1
    entry = json.loads(path.read_text())["entries"][KEY.id()]
    assert entry["tflops"] == 1.25 and entry["measured_at"]


def test_the_write_is_atomic_a_failed_rename_leaves_the_old_file_and_no_temp(tmp_path, monkeypatch):
    path = tmp_path / "c.json"
    cached_ceiling(KEY, Probe(1.0), enabled=True, path=path)
    before = path.read_text()

    def fail(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", fail)
    tflops, how = cached_ceiling(dataclasses.replace(KEY, dtype="bf16"), Probe(2.0), enabled=True, path=path)
    assert tflops == 2.0 and how.startswith("measured in this run (not cached: ")
    assert path.read_text() == before and [p.name for p in tmp_path.iterdir()] == ["c.json"]


def test_the_cache_folder_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv(ceiling_cache.DIR_ENV, str(tmp_path / "mine"))
    assert ceiling_cache.cache_path() == tmp_path / "mine" / ceiling_cache.FILE_NAME
    monkeypatch.delenv(ceiling_cache.DIR_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert ceiling_cache.cache_path() == tmp_path / "xdg" / "perfscope" / ceiling_cache.FILE_NAME


def test_a_cpu_environment_measures_its_ceilings_once_and_mfu_names_the_provenance(tmp_path, monkeypatch):
    from perfscope.measure import environment
    from perfscope.measure.mfu import choose_peak

    monkeypatch.setenv(ceiling_cache.DIR_ENV, str(tmp_path))
    calls = []
    monkeypatch.setattr(environment, "measure_matmul_tflops", lambda device, dtype: calls.append(dtype) or 0.5)
    first = environment.collect_environment("cpu")
    second = environment.collect_environment("cpu")
    assert sorted(calls) == ["bf16", "fp32"]
    assert first.measured_ceiling_tflops == second.measured_ceiling_tflops == {"fp32": 0.5, "bf16": 0.5}
    assert "now cached" in first.measured_ceiling_how and second.measured_ceiling_how.startswith("measured on this machine at ")
    peak = choose_peak(second)
    assert peak.source.startswith("measured matmul ceiling") and "cached in" in peak.source
    off = environment.collect_environment("cpu", cache_ceiling=False)
    assert len(calls) == 4 and off.measured_ceiling_how == "measured in this run (ceiling cache off)"
