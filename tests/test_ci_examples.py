"""examples/ci's workflows, run locally: their own commands, read from the YAML, on a two-commit git repository.

The repository holds a model module and a fixed benchmark workload that imports it (the layout the workflows
assume); the second commit adds work to the model's step. Each workflow's steps run as its CI would run them
(GitHub: every `run:` step with bash -eo pipefail, later steps skipped after a failure unless `if: always()`;
GitLab: `script` in one shell, then `after_script`), with CI's variables set to this repository's commits. Only
the round count is lowered (PERFSCOPE_AB_ARGS, a variable of each file) and the install step skipped (this
checkout is installed). Decided on what load cannot move: each side's counted FLOPs show that the merge base and
the change were measured, and the exit code is the paired decision on the runs `ab` wrote.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from perfscope.check.decision import decide_paired
from perfscope.results import Results
from perfscope.search.compare import paired_test

yaml = pytest.importorskip("yaml")  # a test extra (pyproject.toml)

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "ci"
FAST = "--rounds 2 --max-drop 5% --device cpu --min-window 0.2 --warmup 2 --trial-timeout 120"
EXTRA_FLOPS = 8 * 2 * 160**3  # the change: 8 extra 160×160×160 matmuls per step

MODEL = '''import torch
import torch.nn.functional as F
from torch import nn

EXTRA = torch.randn(160, 160)
EXTRA_MATMULS = {extra}


def make_model():
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))


def loss(model, batch):
    for _ in range(EXTRA_MATMULS):
        torch.mm(EXTRA, EXTRA)
    x, y = batch
    return F.cross_entropy(model(x), y)
'''
WORKLOAD = '''import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this tree's model, not an installed one

import torch

import perfscope
from model import loss, make_model


def batches(batch_size):
    g = torch.Generator().manual_seed(0)
    while True:
        yield torch.randn(batch_size, 32, generator=g), torch.randint(0, 10, (batch_size,), generator=g)


def workload():
    return perfscope.Workload(model=make_model, batches=batches, loss=loss, batch_size=8)
'''


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout.strip()


def two_commits(tmp_path: Path) -> tuple[Path, str]:
    """A repository whose HEAD is the change and whose first commit is the merge base; returns (repo, base sha)."""
    repo = tmp_path / "repo"
    (repo / "bench").mkdir(parents=True)
    _git(repo, "init", "-q")
    _git(repo, "config", "user.email", "ci@example.com")
    _git(repo, "config", "user.name", "ci")
    (repo / "bench" / "workload.py").write_text(WORKLOAD)
    (repo / "model.py").write_text(MODEL.format(extra=0))
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "base")
    base = _git(repo, "rev-parse", "HEAD")
    (repo / "model.py").write_text(MODEL.format(extra=8))
    _git(repo, "commit", "-qam", "change: more work per step")
    return repo, base


def _env(repo: Path, **extra: str) -> dict[str, str]:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "OMP_NUM_THREADS": "1", **extra}
    env.pop("PYTHONPATH", None)  # the workload must import its own tree's model
    return env


def _bash(script: str, repo: Path, env: dict[str, str]) -> int:
    done = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script], cwd=repo, env=env, check=False,
                          timeout=600, capture_output=True, text=True)
    print(script, done.stdout[-3000:], done.stderr[-3000:], sep="\n")
    return done.returncode


def _check_outputs(repo: Path, ab_rc: int) -> None:
    out = repo / "perfscope-ab"
    base, cand = Results.load(out / "baseline" / "results.json"), Results.load(out / "candidate" / "results.json")
    flops = [{t.metrics.flops_per_step for t in r.trials if t.ok} for r in (base, cand)]
    assert all(len(side) == 1 for side in flops), flops
    (base_flops,), (cand_flops,) = flops
    assert cand_flops - base_flops == EXTRA_FLOPS  # the merge base and the change were measured, not one twice
    verdict = decide_paired(paired_test(cand.runs("candidate"), base.runs("baseline")), max_drop=0.05)
    assert ab_rc == {"pass": 0, "regression": 1, "inconclusive": 3}[verdict.status]
    assert (repo / "report.html").stat().st_size > 1000
    assert "samples/s" in (repo / "perfscope-summary.md").read_text()
    assert (repo / "perfscope-junit.xml").exists()


@pytest.mark.slow
def test_the_github_actions_workflow_runs_ab_on_the_merge_base_and_the_change(tmp_path):
    repo, base = two_commits(tmp_path)
    job = yaml.safe_load((EXAMPLES / "github-actions.yml").read_text())["jobs"]["perf-ab"]
    summary = tmp_path / "step-summary.md"
    summary.touch()
    env = _env(repo, **{**{k: str(v) for k, v in job["env"].items()}, "PERFSCOPE_AB_ARGS": FAST,
                        "GITHUB_STEP_SUMMARY": str(summary)})
    failed, ab_rc = False, None
    for step in job["steps"]:
        if "run" not in step or step.get("name") == "Install" or (failed and step.get("if") != "always()"):
            continue
        step_env = {k: str(v).replace("${{ github.event.pull_request.base.sha }}", base) for k, v in step.get("env", {}).items()}
        rc = _bash(step["run"], repo, {**env, **step_env})
        if step.get("name") == "perfscope ab":
            ab_rc = rc
        else:
            assert rc == 0, step["name"]
        failed = failed or rc != 0
    assert ab_rc is not None
    _check_outputs(repo, ab_rc)
    assert "perfscope check" in summary.read_text()  # the verdict reached the job summary


@pytest.mark.slow
def test_the_gitlab_ci_job_runs_ab_on_the_merge_base_and_the_change(tmp_path):
    repo, base = two_commits(tmp_path)
    job = yaml.safe_load((EXAMPLES / "gitlab-ci.yml").read_text())["perfscope-ab"]
    env = _env(repo, **{**{k: str(v) for k, v in job["variables"].items()}, "PERFSCOPE_AB_ARGS": FAST,
                        "CI_MERGE_REQUEST_DIFF_BASE_SHA": base})
    ab_rc = _bash("\n".join(job["script"]), repo, env)
    assert _bash("\n".join(job["after_script"]), repo, env) == 0
    _check_outputs(repo, ab_rc)
    assert all((repo / p).exists() for p in job["artifacts"]["paths"]) and (repo / job["artifacts"]["reports"]["junit"]).exists()
