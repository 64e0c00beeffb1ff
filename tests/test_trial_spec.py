"""The typed spec of a trial process: it survives the process boundary whole, and a malformed one is refused by name."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from perfscope.results.config import TrialConfig
from perfscope.trial.launch import Launch
from perfscope.trial.spec import (
    MODES,
    FollowSpec,
    ProbeSpec,
    SpecError,
    StopSpec,
    TrialSpec,
    read_spec,
    spec_from_dict,
    spec_to_dict,
    write_spec,
)

LAUNCH = Launch(nproc_per_node=2, nnodes=2, node_rank=1, rdzv_endpoint="node0:29400", collective_timeout_s=30.0)
SPECS = [
    ProbeSpec(device="auto"),
    ProbeSpec(device="cuda", workload_path="/w.py", measure_ceiling=False, result_path="/r.json"),
    TrialSpec(workload_path="/w.py", config=TrialConfig(micro_batch_size=8, precision="bf16")),
    TrialSpec(workload_path="/w.py", config=TrialConfig(micro_batch_size=4, nproc_per_node=2, data_parallel="ddp"),
              artifacts_dir="/a", launch=LAUNCH, result_path="/r.json"),
    FollowSpec(device="cpu", workload_path="/w.py", work_dir="/job1", launch=LAUNCH),
    StopSpec(device="cuda", launch=LAUNCH, result_path="/r.json"),
]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.mode)
def test_every_spec_round_trips_through_json(spec, tmp_path: Path) -> None:
    wire = json.loads(json.dumps(spec_to_dict(spec)))
    assert wire["mode"] == spec.mode
    assert spec_from_dict(wire) == spec
    write_spec(tmp_path / "spec.json", dataclasses.replace(spec, result_path="/out/result.json"))
    back = read_spec(tmp_path / "spec.json")
    assert type(back) is type(spec) and back.result_path == "/out/result.json"


def test_every_mode_has_one_class() -> None:
    assert sorted(MODES) == ["follow", "probe", "stop", "trial"]
    assert {cls.mode for cls in MODES.values()} == set(MODES)


def test_a_trial_spec_carries_a_typed_config_and_launch() -> None:
    spec = spec_from_dict(spec_to_dict(SPECS[3]))
    assert isinstance(spec, TrialSpec) and isinstance(spec.config, TrialConfig) and isinstance(spec.launch, Launch)
    assert spec.device == "cpu" and spec.launch.world_size == 4


GOOD = spec_to_dict(SPECS[3])


@pytest.mark.parametrize(("data", "message"), [
    ([], "JSON object"),
    ({**GOOD, "mode": "tral"}, "unknown trial mode 'tral'"),
    ({k: v for k, v in GOOD.items() if k != "mode"}, "unknown trial mode None"),
    ({k: v for k, v in GOOD.items() if k != "workload_path"}, "missing field 'workload_path'"),
    ({**GOOD, "work_dir": "/x"}, "unknown field(s) ['work_dir']"),
    ({**GOOD, "workload_path": 3}, "trial spec.workload_path: expected a string"),
    ({**GOOD, "artifacts_dir": ["/a"]}, "trial spec.artifacts_dir: expected a string"),
    ({**GOOD, "config": {"micro_batch_size": 8, "stepz": 3}}, "trial spec.config: unknown field(s) ['stepz']"),
    ({**GOOD, "config": "cpu"}, "trial spec.config: expected an object (TrialConfig)"),
    ({**GOOD, "launch": {**dataclasses.asdict(LAUNCH), "nnodes": "2"}}, "trial spec.launch.nnodes: expected an integer"),
    ({**GOOD, "launch": {**dataclasses.asdict(LAUNCH), "nnodes": True}}, "trial spec.launch.nnodes: expected an integer"),
    ({**GOOD, "launch": {**dataclasses.asdict(LAUNCH), "port": 1}}, "unknown field(s) ['port']"),
    ({"mode": "probe", "device": "cpu", "measure_ceiling": "no"}, "probe spec.measure_ceiling: expected true or false"),
    ({"mode": "stop", "device": "cpu"}, "missing field 'launch'"),
])
def test_a_malformed_spec_is_refused_naming_the_field(data, message) -> None:
    with pytest.raises(SpecError) as info:
        spec_from_dict(data)
    assert message in str(info.value)


def test_an_integer_timeout_is_a_float() -> None:
    data = {**GOOD, "launch": {**dataclasses.asdict(LAUNCH), "collective_timeout_s": 60}}
    spec = spec_from_dict(data)
    assert isinstance(spec, TrialSpec) and spec.launch is not None
    assert spec.launch.collective_timeout_s == 60.0 and isinstance(spec.launch.collective_timeout_s, float)


def test_the_child_refuses_a_spec_without_a_result_path(tmp_path: Path) -> None:
    write_spec(tmp_path / "spec.json", ProbeSpec(device="cpu"))
    with pytest.raises(SpecError, match="no result_path"):
        read_spec(tmp_path / "spec.json")
    (tmp_path / "bad.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(SpecError, match="unreadable trial spec"):
        read_spec(tmp_path / "bad.json")


def test_a_fork_request_round_trips_and_a_malformed_one_is_refused() -> None:
    from perfscope.trial.zygote import ForkRequest

    request = ForkRequest("/t/spec.json", "/t/trial.log", {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})
    assert ForkRequest.from_line(request.to_line()) == request
    for bad in (b'{"spec": "/s", "log": "/l"}', b'{"spec": "/s", "log": "/l", "env": {"A": 1}}', b'[1]',
                b'{"spec": 1, "log": "/l", "env": {}}'):
        with pytest.raises(ValueError):
            ForkRequest.from_line(bad)
