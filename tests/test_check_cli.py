"""`perfscope check` and `perfscope baseline` through the CLI: exit codes, messages, output files."""

import json
import xml.etree.ElementTree as ET

import pytest

from perfscope import cli
from perfscope.cli import main
from perfscope.results import SCHEMA_VERSION
from tests.factories import make_results, make_trial


@pytest.fixture
def files(tmp_path):
    """Writes results files: files(name, median_s=..., **make_trial kwargs, mutate=callable) -> path."""

    def write(name, *, mutate=None, trials=None, **trial_kwargs):
        results = make_results(trials if trials is not None else [make_trial(**trial_kwargs)])
        if mutate:
            mutate(results)
        return str(results.save(tmp_path / name))

    return write


@pytest.fixture
def baseline(files):
    return files("baseline.json", median_s=0.1, seed=1)


def check(current, baseline, *extra):
    return main(["check", current, "--baseline", baseline, *extra])


def test_exit_codes_are_pinned():
    assert (cli.EXIT_OK, cli.EXIT_REGRESSION, cli.EXIT_USER, cli.EXIT_INCONCLUSIVE) == (0, 1, 2, 3)


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
    for column in ("metric", "baseline", "current", "change", "interval", "p-value", "verdict"):
        assert column in out
    assert "REGRESSION" in out and "-10." in out


def test_a_drop_below_the_threshold_exits_0(files, baseline):
    assert check(files("current.json", median_s=0.1 / 0.97, seed=2), baseline, "--max-drop", "5%") == 0


def test_the_threshold_is_honoured(files, baseline):
    current = files("current.json", median_s=0.1 / 0.9, seed=2)
    assert check(current, baseline, "--max-drop", "20%") == 0
    assert check(current, baseline, "--max-drop", "0.05") == 1


def test_an_improvement_exits_0(files, baseline):
    assert check(files("current.json", median_s=0.07, seed=2), baseline) == 0


def test_too_few_samples_exits_3(files, capsys):
    base = files("baseline.json", median_s=0.1, seed=1, n=3)
    assert check(files("current.json", median_s=0.1, seed=2, n=3), base) == 3
    assert "too few samples" in capsys.readouterr().out


@pytest.mark.parametrize("metric", ["samples_per_s", "step_time"])
def test_other_metrics(files, baseline, capsys, metric):
    assert check(files("current.json", median_s=0.12, seed=2), baseline, "--metric", metric) == 1
    assert check(files("same.json", median_s=0.1, seed=2), baseline, "--metric", metric) == 0


def test_several_metrics_each_get_a_verdict(files, baseline, tmp_path):
    junit = tmp_path / "gate.xml"
    current = files("current.json", median_s=0.12, seed=2)
    assert check(current, baseline, "--metric", "mfu", "--metric", "step_time", "--junit", str(junit)) == 1
    names = [case.get("name") for case in ET.parse(junit).getroot().iter("testcase")]
    assert names == ["mfu", "step_time"]


# ------------------------------------------------------------------------------------- exit 2

def test_missing_baseline_exits_2(files, tmp_path, capsys):
    assert check(files("current.json"), str(tmp_path / "nope.json")) == 2
    assert "no such file" in capsys.readouterr().err


def test_corrupt_baseline_exits_2(files, tmp_path, capsys):
    (tmp_path / "bad.json").write_text('{"schema_version": 1, "trials": [')
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


def test_a_torch_version_change_warns_but_compares(files, baseline, capsys):
    current = files("current.json", seed=2, mutate=lambda r: setattr(r.environment, "torch_version", "2.4.0"))
    assert check(current, baseline) == 0
    assert "warning: torch version" in capsys.readouterr().out


def test_a_different_flop_count_is_a_mismatch_for_mfu_only(files, baseline):
    current = files("current.json", seed=2, flops_per_step=5e13)
    assert check(current, baseline) == 2
    assert check(current, baseline, "--metric", "samples_per_s") == 0


def test_unknown_trial_exits_2(files, baseline, capsys):
    assert check(files("current.json", seed=2), baseline, "--trial", "amp_bf16") == 2
    assert "no trial 'amp_bf16'" in capsys.readouterr().err


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
    assert "| metric | baseline | current | change | interval | p-value | verdict |" in text
    assert not list(md.parent.glob(".*.tmp"))  # the atomic write left no temp file


def test_markdown_explains_a_refused_comparison(files, baseline, tmp_path):
    md = tmp_path / "summary.md"
    current = files("current.json", seed=2, mutate=lambda r: setattr(r.environment, "device_type", "cpu"))
    assert check(current, baseline, "--markdown", str(md)) == 2
    assert "device type" in md.read_text() and "Not compared" in md.read_text()


def test_junit_has_a_failure_on_regression(files, baseline, tmp_path):
    junit = tmp_path / "gate.xml"
    assert check(files("current.json", median_s=0.1 / 0.9, seed=2), baseline, "--junit", str(junit)) == 1
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite.get("tests") == "1" and suite.get("failures") == "1"
    failure = suite.find("testcase/failure")
    assert failure is not None and "MFU" in failure.get("message")


def test_junit_has_no_failure_on_pass_and_an_error_when_inconclusive(files, tmp_path):
    junit = tmp_path / "gate.xml"
    base = files("baseline.json", seed=1)
    assert check(files("same.json", seed=2), base, "--junit", str(junit)) == 0
    assert ET.parse(junit).getroot().find("testsuite/testcase/failure") is None
    few = files("few.json", seed=3, n=3)
    assert check(few, base, "--junit", str(junit)) == 3
    error = ET.parse(junit).getroot().find("testsuite/testcase/error")
    assert error is not None and error.get("type") == "inconclusive"


def test_junit_escapes_hostile_names(files, tmp_path):
    name = 'odd<&>"\x1b trial'
    base = files("baseline.json", trials=[make_trial(name, seed=1)])
    cur = files("current.json", trials=[make_trial(name, median_s=0.2, seed=2)])
    junit = tmp_path / "gate.xml"
    assert check(cur, base, "--trial", name, "--junit", str(junit)) == 1
    case = ET.parse(junit).getroot().find("testsuite/testcase")  # parses: escaped, control char replaced
    assert case.get("classname").startswith("perfscope.check.odd<&>\"")


# ----------------------------------------------------------------------------------- baseline

def test_baseline_save_copies_and_refuses_to_overwrite(files, tmp_path, capsys):
    results = files("results.json", seed=1)
    dest = tmp_path / "ci" / "base.json"
    assert main(["baseline", "save", results, "--to", str(dest)]) == 0
    assert dest.read_bytes() == (tmp_path / "results.json").read_bytes()
    assert main(["baseline", "save", files("newer.json", seed=2), "--to", str(dest)]) == 2
    assert "baseline update" in capsys.readouterr().err
    assert dest.read_bytes() == (tmp_path / "results.json").read_bytes()


def test_baseline_update_overwrites(files, tmp_path):
    dest = tmp_path / "base.json"
    assert main(["baseline", "save", files("old.json", seed=1), "--to", str(dest)]) == 0
    assert main(["baseline", "update", files("new.json", seed=2), "--to", str(dest)]) == 0
    assert dest.read_bytes() == (tmp_path / "new.json").read_bytes()


def test_baseline_save_defaults_to_perfscope_baseline_json_which_check_reads(files, tmp_path, monkeypatch):
    results = files("results.json", seed=1)
    current = files("current.json", seed=2)
    monkeypatch.chdir(tmp_path)
    assert main(["baseline", "save", results]) == 0
    assert (tmp_path / "perfscope-baseline.json").exists()
    assert main(["check", current]) == 0


@pytest.mark.parametrize("trials", [[make_trial(status="oom")], [make_trial(n=3)]])
def test_baseline_save_refuses_unusable_results(files, tmp_path, capsys, trials):
    dest = tmp_path / "base.json"
    assert main(["baseline", "save", files("results.json", trials=trials), "--to", str(dest)]) == 2
    assert "not usable as a baseline" in capsys.readouterr().err
    assert not dest.exists()


def test_baseline_save_refuses_corrupt_results(tmp_path, capsys):
    (tmp_path / "bad.json").write_text("[]")
    assert main(["baseline", "save", str(tmp_path / "bad.json"), "--to", str(tmp_path / "b.json")]) == 2
    assert "JSON object" in capsys.readouterr().err
