"""`perfscope check` and `perfscope baseline` through the CLI: exit codes, messages, output files."""

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from perfscope import cli
from perfscope.check.baseline import BaselineHistory
from perfscope.cli import main
from perfscope.results import SCHEMA_VERSION, Results, msg
from perfscope.wording import words
from tests.factories import contended, make_results, make_runs, make_trial


@pytest.fixture
def files(tmp_path):
    """Writes results files of several runs: files(name, median_s=..., runs=..., **make_runs kwargs) -> path.

    Defaults: 3 runs (a CI job's `analyze --repeat 3`) with 1.5% run-to-run noise (a quiet runner: 3 v 5 runs
    then exclude a 5% drop); trials= writes those instead.
    """

    def write(name, *, mutate=None, trials=None, runs=3, **run_kwargs):
        run_kwargs.setdefault("run_cv", 0.015)
        results = make_results(trials if trials is not None else make_runs(runs=runs, **run_kwargs))
        if mutate:
            mutate(results)
        return str(results.save(tmp_path / name))

    return write


@pytest.fixture
def baseline(files):
    return files("baseline.json", median_s=0.1, seed=1, runs=5)


SAME_SETUP = ("--between-session", "0%")
"""The files here are one stored session: stating no between-session offset pins the within-session rule
(one session without it is never called a regression: tests/test_check_sessions.py)."""


def check(current, baseline, *extra):
    currents = current if isinstance(current, list) else [current]
    return main(["check", *currents, "--baseline", baseline, *SAME_SETUP, *extra])


def test_exit_codes_are_pinned():
    assert (cli.EXIT_OK, cli.EXIT_REGRESSION, cli.EXIT_USER, cli.EXIT_INCONCLUSIVE, cli.EXIT_NOT_COMPARABLE) == (0, 1, 2, 3, 4)


def test_help_lists_the_gate_commands(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "check" in out and "baseline" in out


@pytest.mark.parametrize("seed", [2, 3, 4])
def test_noise_only_exits_0(files, baseline, capsys, seed):
    assert check(files("current.json", median_s=0.1, seed=seed), baseline) == 0
    out = capsys.readouterr().out
    assert "PASS" in out and "MFU" in out


def test_a_ten_percent_drop_exits_1_with_a_table(files, baseline, capsys):
    assert check(files("current.json", median_s=0.1 / 0.9, seed=2), baseline) == 1
    out = capsys.readouterr().out
    for column in ("metric", "baseline", "current", "change", "interval", "runs (cur/base)", "resolves", "verdict"):
        assert column in out
    assert "REGRESSION" in out and "3/5" in out
    assert re.search(r"^MFU .* -1[0-2]\.\d% ", out, re.MULTILINE), out  # the change column: about -10%


def test_a_drop_below_the_threshold_exits_0(files):
    # a quiet machine (1% between runs) excludes a 5% drop when 2% is measured
    base = files("baseline.json", seed=1, runs=5, run_cv=0.01)
    assert check(files("current.json", median_s=0.1 / 0.98, seed=2, run_cv=0.01), base, "--max-drop", "5%") == 0


def test_the_threshold_is_honoured(files, baseline):
    current = files("current.json", median_s=0.1 / 0.9, seed=2)
    assert check(current, baseline, "--max-drop", "20%") == 0
    assert check(current, baseline, "--max-drop", "0.05") == 1


def test_an_improvement_exits_0(files, baseline):
    assert check(files("current.json", median_s=0.07, seed=2), baseline) == 0


def test_too_few_runs_exits_3_saying_what_to_do(files, capsys):
    base = files("baseline.json", median_s=0.1, seed=1, runs=1, n=200)
    assert check(files("current.json", median_s=0.1, seed=2, runs=1, n=200), base) == 3
    out = capsys.readouterr().out
    assert "INCONCLUSIVE" in out and "run-to-run noise" in out and "--repeat" in out


def test_a_noisy_drop_exits_3_not_1(files):
    # 15% between runs on a shared machine: a 10% drop past the 5% tolerance is not told apart from noise
    base = files("baseline.json", run_factors=[0.85, 1.0, 1.15], seed=1)
    assert check(files("current.json", run_factors=[0.85, 1.0, 1.15], median_s=0.1 / 0.9, seed=2), base) == 3


def test_several_current_files_pool_their_runs(files, baseline, capsys):
    parts = [files(f"current{i}.json", median_s=0.1 / 0.9, seed=10 + i, runs=2) for i in range(2)]
    assert check(parts, baseline) == 1
    out = capsys.readouterr().out
    assert "4/5" in out and "current0.json, " in out


def test_a_stalled_loop_exits_1_though_its_median_step_did_not_move(files, baseline, capsys):
    current = files("current.json", seed=2, n=32, stall_every=4, stall_s=0.1)
    assert check(current, baseline, "--metric", "samples_per_s") == 1
    out = capsys.readouterr().out
    assert re.search(r"^samples/s .* -(19|20|21)\.\d% ", out, re.MULTILINE), out


@pytest.mark.parametrize("metric", ["samples_per_s", "step_time"])
def test_other_metrics(files, baseline, capsys, metric):
    assert check(files("current.json", median_s=0.12, seed=2), baseline, "--metric", metric) == 1
    assert check(files("same.json", median_s=0.1, seed=2), baseline, "--metric", metric) == 0


def test_several_metrics_each_get_a_verdict(files, baseline, tmp_path):
    junit = tmp_path / "gate.xml"
    current = files("current.json", median_s=0.12, seed=2)
    assert check(current, baseline, "--metric", "mfu", "--metric", "step_time", "--junit", str(junit)) == 1
    suite = ET.parse(junit).getroot().find("testsuite")
    assert [case.get("name") for case in suite.iter("testcase")] == ["mfu", "step_time"]
    assert suite.get("failures") == "2"


# ------------------------------------------------------------------------------------- exit 2

def test_missing_baseline_exits_2(files, tmp_path, capsys):
    assert check(files("current.json"), str(tmp_path / "nope.json")) == 2
    assert "no such file" in capsys.readouterr().err


def test_corrupt_baseline_exits_2(files, tmp_path, capsys):
    (tmp_path / "bad.json").write_text('{"schema_version": 2, "trials": [')
    assert check(files("current.json"), str(tmp_path / "bad.json")) == 2
    assert "not valid JSON" in capsys.readouterr().err


def test_other_schema_version_exits_2(files, tmp_path, capsys):
    data = make_results().to_dict()
    data["schema_version"] = SCHEMA_VERSION + 1
    (tmp_path / "future.json").write_text(json.dumps(data))
    assert check(files("current.json"), str(tmp_path / "future.json")) == 2
    assert "schema_version" in capsys.readouterr().err


def test_another_device_and_workload_exit_2_listing_every_difference(files, baseline, capsys):
    def other(results):
        results.environment.device_name = "NVIDIA A100-SXM4-80GB"
        results.workload.sha256 = "f" * 64

    assert check(files("current.json", seed=2, mutate=other), baseline) == 2
    err = capsys.readouterr().err
    assert "not comparable" in err and "device name" in err and "workload sha256" in err
    assert "A100" in err and "--allow-mismatch" in err


def test_allow_mismatch_downgrades_to_a_warning(files, baseline, capsys):
    current = files("current.json", seed=2, mutate=lambda r: setattr(r.environment, "device_name", "A100"))
    assert check(current, baseline, "--allow-mismatch") == 0
    assert "warning: device name" in capsys.readouterr().out


def test_a_torch_version_change_refuses_unless_allowed(files, baseline, capsys):
    current = files("current.json", seed=2, mutate=lambda r: setattr(r.environment, "torch_version", "2.4.0"))
    assert check(current, baseline) == 4  # not comparable: another software stack, not an input error
    err = capsys.readouterr().err
    assert "not comparable: torch version '2.13.0' → '2.4.0'" in err and "NOT COMPARABLE" in err
    assert "torch version: baseline '2.13.0', current '2.4.0'" in err
    assert check(current, baseline, "--allow-mismatch") == 0
    assert "warning: torch version" in capsys.readouterr().out


def test_a_different_flop_count_is_a_mismatch_for_mfu_only(files, baseline, capsys):
    current = files("current.json", seed=2, flops_per_step=5e13)
    assert check(current, baseline) == 2
    assert "model FLOPs per step" in capsys.readouterr().err
    assert check(current, baseline, "--metric", "samples_per_s") == 0


def test_current_files_that_disagree_exit_2(files, baseline, capsys):
    one = files("one.json", seed=2, runs=2)
    other = files("other.json", seed=3, runs=2, mutate=lambda r: setattr(r.workload, "sha256", "e" * 64))
    assert check([one, other], baseline) == 2
    assert "workload sha256" in capsys.readouterr().err


def test_unknown_trial_exits_2(files, baseline, capsys):
    assert check(files("current.json", seed=2), baseline, "--trial", "amp_bf16") == 2
    err = capsys.readouterr().err
    assert "no run of 'amp_bf16'" in err and "configurations: baseline" in err


@pytest.mark.parametrize("bad", ["5", "150%", "-1%", "lots"])
def test_bad_max_drop_is_a_usage_error(files, baseline, bad):
    with pytest.raises(SystemExit) as exc:
        check(files("current.json"), baseline, "--max-drop", bad)
    assert exc.value.code == 2


# ------------------------------------------------------------------------------------ outputs

def test_markdown_summary_is_written(files, baseline, tmp_path):
    md = tmp_path / "out" / "summary.md"
    assert check(files("current.json", median_s=0.1 / 0.9, seed=2), baseline, "--markdown", str(md)) == 1
    text = md.read_text()
    assert text.startswith("## ") and "REGRESSION" in text
    assert "| metric | baseline | current | change | interval | runs (cur/base) | resolves | verdict |" in text
    assert "| 3/5 |" in text
    assert not list(md.parent.glob(".*.tmp"))  # the atomic write left no temp file


def test_markdown_explains_a_refused_comparison(files, baseline, tmp_path):
    md = tmp_path / "summary.md"
    current = files("current.json", seed=2, mutate=lambda r: setattr(r.environment, "device_type", "cpu"))
    assert check(current, baseline, "--markdown", str(md)) == 4
    assert "device type" in md.read_text() and "Not compared" in md.read_text() and "NOT COMPARABLE" in md.read_text()


def test_junit_has_a_failure_on_regression(files, baseline, tmp_path):
    junit = tmp_path / "gate.xml"
    assert check(files("current.json", median_s=0.1 / 0.9, seed=2), baseline, "--junit", str(junit)) == 1
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite.get("tests") == "1" and suite.get("failures") == "1"
    failure = suite.find("testcase/failure")
    assert failure is not None and "MFU" in failure.get("message")


def test_junit_has_no_failure_on_pass_and_an_error_when_inconclusive(files, tmp_path):
    junit = tmp_path / "gate.xml"
    base = files("baseline.json", seed=1, runs=5)
    assert check(files("same.json", seed=2), base, "--junit", str(junit)) == 0
    assert ET.parse(junit).getroot().find("testsuite/testcase/failure") is None
    one = files("one.json", seed=3, runs=1)
    assert check(files("few.json", seed=4, runs=1), one, "--junit", str(junit)) == 3
    suite = ET.parse(junit).getroot().find("testsuite")
    error = suite.find("testcase/error")
    assert error is not None and error.get("type") == "inconclusive"
    assert suite.get("errors") == "1" and suite.get("failures") == "0"


def test_junit_escapes_hostile_names(files, tmp_path):
    name = 'odd<&>"\x1b trial'
    base = files("baseline.json", trials=make_runs(name, seed=1))
    cur = files("current.json", trials=make_runs(name, median_s=0.2, seed=2, runs=3))
    junit = tmp_path / "gate.xml"
    assert check(cur, base, "--trial", name, "--junit", str(junit)) == 1
    case = ET.parse(junit).getroot().find("testsuite/testcase")  # parses: escaped, control char replaced
    assert case.get("classname").startswith("perfscope.check.odd<&>\"")


# ----------------------------------------------------------------------------------- baseline

def test_baseline_save_stores_one_session_and_refuses_to_overwrite(files, tmp_path, capsys):
    results = files("results.json", seed=1, runs=5)
    dest = tmp_path / "ci" / "base.json"
    assert main(["baseline", "save", results, "--to", str(dest)]) == 0
    history = BaselineHistory.load(dest)
    assert len(history.sessions) == 1
    assert history.latest.to_dict() == Results.load(results).to_dict()  # the session is the file, as it was
    assert "1 session(s) of 5 run(s)" in capsys.readouterr().out
    before = dest.read_bytes()
    assert main(["baseline", "save", files("newer.json", seed=2), "--to", str(dest)]) == 2
    assert "baseline update" in capsys.readouterr().err
    assert dest.read_bytes() == before


def test_baseline_update_adds_sessions_and_replace_restarts(files, tmp_path, capsys):
    dest = tmp_path / "base.json"
    assert main(["baseline", "save", files("old.json", seed=1), "--to", str(dest)]) == 0
    assert main(["baseline", "update", files("new.json", seed=2), "--to", str(dest)]) == 0
    assert "2 session(s) of 3/3 run(s)" in capsys.readouterr().out
    assert [s.to_dict() for s in BaselineHistory.load(dest).sessions] == [
        Results.load(tmp_path / n).to_dict() for n in ("old.json", "new.json")]
    assert main(["baseline", "update", files("third.json", seed=3), "--to", str(dest), "--keep", "2"]) == 0
    assert [s.to_dict() for s in BaselineHistory.load(dest).sessions] == [
        Results.load(tmp_path / n).to_dict() for n in ("new.json", "third.json")]
    assert main(["baseline", "update", files("fresh.json", seed=4), "--to", str(dest), "--replace"]) == 0
    assert [s.to_dict() for s in BaselineHistory.load(dest).sessions] == [Results.load(tmp_path / "fresh.json").to_dict()]


def test_a_schema_1_baseline_still_loads_as_one_session_and_update_extends_it(files, tmp_path, capsys):
    old = tmp_path / "old-baseline.json"
    old.write_bytes(Path(files("legacy.json", seed=1, runs=5)).read_bytes())  # a plain results document: schema 1
    current = files("current.json", seed=2)
    # same code against one session: the spread between days is assumed (5%), too wide to exclude a 5% drop
    assert main(["check", current, "--baseline", str(old)]) == 3
    assert "1 stored session(s) cannot estimate the spread between days" in capsys.readouterr().out
    assert main(["baseline", "update", files("next.json", seed=3), "--to", str(old)]) == 0
    assert len(BaselineHistory.load(old).sessions) == 2


def test_baseline_save_defaults_to_perfscope_baseline_json_which_check_reads(files, tmp_path, monkeypatch):
    results = files("results.json", seed=1, runs=5)
    current = files("current.json", seed=2)
    monkeypatch.chdir(tmp_path)
    assert main(["baseline", "save", results]) == 0
    assert (tmp_path / "perfscope-baseline.json").exists()
    assert main(["check", current, "--between-session", "0%"]) == 0


def test_baseline_save_of_several_files_stores_each_as_a_session(files, tmp_path, capsys):
    parts = [files(f"run{i}.json", seed=i, runs=2) for i in range(3)]
    dest = tmp_path / "base.json"
    assert main(["baseline", "save", *parts, "--to", str(dest)]) == 0
    assert [len(s.trials) for s in BaselineHistory.load(dest).sessions] == [2, 2, 2]
    capsys.readouterr()
    assert check(files("slow.json", seed=9, median_s=0.1 / 0.8), str(dest)) == 1
    assert "3/6" in capsys.readouterr().out  # every stored run is evidence


def test_baseline_save_refuses_files_of_other_workloads(files, tmp_path, capsys):
    one = files("one.json", seed=1)
    other = files("other.json", seed=2, mutate=lambda r: setattr(r.workload, "sha256", "e" * 64))
    dest = tmp_path / "base.json"
    assert main(["baseline", "save", one, other, "--to", str(dest)]) == 2
    assert "cannot join" in capsys.readouterr().err
    assert not dest.exists()


def test_baseline_save_of_a_single_run_warns_that_the_gate_needs_more(files, tmp_path, capsys):
    assert main(["baseline", "save", files("one.json", seed=1, runs=1), "--to", str(tmp_path / "b.json")]) == 0
    assert words(msg("few_baseline_runs", runs=1)) in capsys.readouterr().err


def _no_timed_window(results):
    for t in results.trials:
        t.metrics.windows, t.metrics.steps, t.metrics.wall_s = [], 0, 0.0


def _all_excluded(results):
    for t in results.trials:
        t.excluded = contended()


@pytest.mark.parametrize("trials, mutate", [
    ([make_trial(status="oom")], None),
    (None, _no_timed_window),
    (None, _all_excluded),
])
def test_baseline_save_refuses_unusable_results(files, tmp_path, capsys, trials, mutate):
    dest = tmp_path / "base.json"
    assert main(["baseline", "save", files("results.json", trials=trials, mutate=mutate), "--to", str(dest)]) == 2
    assert "not usable as a baseline" in capsys.readouterr().err
    assert not dest.exists()


def test_baseline_save_refuses_corrupt_results(tmp_path, capsys):
    (tmp_path / "bad.json").write_text("[]")
    assert main(["baseline", "save", str(tmp_path / "bad.json"), "--to", str(tmp_path / "b.json")]) == 2
    assert "JSON object" in capsys.readouterr().err
