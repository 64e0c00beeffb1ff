"""The CPU matmul ceiling cache: measured once per key, re-measured when anything in the key changes or the
file is unusable, never read when disabled, written atomically, and its provenance reported."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest

from perfscope.measure import ceiling_cache
from perfscope.measure.ceiling_cache import CACHE_ENV, CeilingKey, cached_ceilings


class Probe:
    """A stand-in for the matmul probe that counts its calls per dtype."""

    def __init__(self, value: float = 1.25, fails: tuple[str, ...] = ()) -> None:
        self.calls: list[str] = []
        self.value, self.fails = value, fails

    def __call__(self, dtype: str) -> float:
        self.calls.append(dtype)
        if dtype in self.fails:
            raise RuntimeError(f"no {dtype} matmul here")
        return self.value


KEY = CeilingKey(dtype="fp32", host="box", cpu_model="Test CPU", usable_cores=2.0, threads=2, torch_version="2.0")
BF16 = dataclasses.replace(KEY, dtype="bf16")


def test_a_second_run_reads_the_cached_ceilings_and_says_so(tmp_path):
    path, probe = tmp_path / "c.json", Probe()
    first = cached_ceilings({"fp32": KEY, "bf16": BF16}, probe, enabled=True, path=path)
    second = cached_ceilings({"fp32": KEY, "bf16": BF16}, Probe(9.0), enabled=True, path=path)
    assert probe.calls == ["fp32", "bf16"] and first.tflops == second.tflops == {"fp32": 1.25, "bf16": 1.25}
    assert first.how.startswith("measured in this run at ") and f"now cached in {path}" in first.how
    assert second.how.startswith("measured on this machine at ") and second.how.endswith(f"cached in {path}")


@pytest.mark.parametrize("change", [{"dtype": "bf16"}, {"threads": 1}, {"usable_cores": 1.0}, {"torch_version": "2.1"},
                                    {"cpu_model": "Other CPU"}, {"host": "other"}, {"method": ceiling_cache.METHOD + 1}])
def test_a_changed_key_is_measured_again_and_both_are_kept(tmp_path, change):
    path = tmp_path / "c.json"
    cached_ceilings({"fp32": KEY}, Probe(1.0), enabled=True, path=path)
    probe = Probe(2.0)
    assert cached_ceilings({"fp32": dataclasses.replace(KEY, **change)}, probe, enabled=True, path=path).tflops == {"fp32": 2.0}
    assert probe.calls == ["fp32"]
    assert cached_ceilings({"fp32": KEY}, Probe(5.0), enabled=True, path=path).tflops == {"fp32": 1.0}  # the first survives


def test_a_partial_hit_names_which_dtype_came_from_where(tmp_path):
    path = tmp_path / "c.json"
    cached_ceilings({"fp32": KEY}, Probe(1.0), enabled=True, path=path)
    got = cached_ceilings({"fp32": KEY, "bf16": BF16}, Probe(2.0), enabled=True, path=path)
    assert got.tflops == {"fp32": 1.0, "bf16": 2.0}
    assert got.how.startswith("fp32: measured on this machine at ") and "; bf16: measured in this run at " in got.how


def test_a_dtype_that_fails_is_explained_and_never_cached(tmp_path):
    path = tmp_path / "c.json"
    got = cached_ceilings({"fp32": KEY, "bf16": BF16}, Probe(fails=("bf16",)), enabled=True, path=path)
    assert got.tflops == {"fp32": 1.25} and "no bf16 matmul" in got.errors["bf16"]
    again = Probe()
    cached_ceilings({"fp32": KEY, "bf16": BF16}, again, enabled=True, path=path)
    assert again.calls == ["bf16"]


def test_disabled_measures_every_time_and_never_touches_the_file(tmp_path, monkeypatch):
    path, probe = tmp_path / "c.json", Probe()
    for _ in range(2):
        got = cached_ceilings({"fp32": KEY}, probe, enabled=False, path=path)
        assert got.tflops == {"fp32": 1.25} and got.how == "measured in this run (ceiling cache off)"
    assert probe.calls == ["fp32", "fp32"] and not path.exists()
    monkeypatch.setenv(CACHE_ENV, "0")
    cached_ceilings({"fp32": KEY}, probe, path=path)
    assert len(probe.calls) == 3 and not path.exists()


@pytest.mark.parametrize("text", ["{not json", "", json.dumps([1, 2]), json.dumps({"format": 999, "entries": {}}),
                                  json.dumps({"format": 1, "entries": {KEY.id(): {"tflops": -1.0, "measured_at": "x"}}}),
                                  json.dumps({"format": 1, "entries": {KEY.id(): {"tflops": "fast", "measured_at": "x"}}}),
                                  json.dumps({"format": 1, "entries": {KEY.id(): {"tflops": 3.0}}})])
def test_a_corrupt_file_or_entry_is_measured_again_and_rewritten(tmp_path, text):
    path, probe = tmp_path / "c.json", Probe()
    path.write_text(text)
    assert cached_ceilings({"fp32": KEY}, probe, enabled=True, path=path).tflops == {"fp32": 1.25}
    assert probe.calls == ["fp32"]
    entry = json.loads(path.read_text())["entries"][KEY.id()]
    assert entry["tflops"] == 1.25 and entry["measured_at"]


def test_the_write_is_atomic_a_failed_rename_leaves_the_old_file_and_no_temp(tmp_path, monkeypatch):
    path = tmp_path / "c.json"
    cached_ceilings({"fp32": KEY}, Probe(1.0), enabled=True, path=path)
    before = path.read_text()

    def fail(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", fail)
    got = cached_ceilings({"bf16": BF16}, Probe(2.0), enabled=True, path=path)
    assert got.tflops == {"bf16": 2.0} and "(not cached: " in got.how
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


def test_the_report_shows_where_the_ceiling_came_from():
    from perfscope.report.tables import environment as _environment
    from perfscope.results import Environment, Results, WorkloadInfo

    env = Environment(device_type="cpu", device_name="Test CPU", measured_ceiling_tflops={"fp32": 0.1},
                      measured_ceiling_how="measured on this machine at 2026-11-24T16:40:03+00:00, cached in /c.json")
    results = Results(environment=env, workload=WorkloadInfo(path="w.py", sha256="0", name="w"))
    rows = {r.label: r.value for r in _environment(results)}
    assert rows["Measured matmul ceiling"] == ("fp32 0.1 TFLOP/s (measured on this machine at 2026-11-24T16:40:03+00:00, "
                                               "cached in /c.json)")

