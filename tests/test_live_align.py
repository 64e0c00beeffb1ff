"""The ranks of one job record the same steps (perfscope.live.client.aligned_answers), decided without timing.

The ranks here are two answering threads registered as processes of other hosts (alive by heartbeat), so what each
records is chosen by the test: the first request's windows differ (a rank that read it late), the next agree. The
real two-rank job is tests/test_live.py's; this is the rule it relies on, on the cases load only sometimes makes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from perfscope.errors import UserError
from perfscope.live import client
from perfscope.live import protocol as p


def member(i: int) -> p.Status:
    return p.Status(pid=100 + i, host=f"node-{i}", rank=i, control="", signal=None, poll_s=0.05, step=40,
                    updated=time.time(), steps_per_s=10.0)


class Ranks:
    """Two ranks that answer each new request, rank 1 recording ``lag(n)`` steps after rank 0 on the n-th, and keep
    their heartbeats fresh."""

    def __init__(self, control: Path, lag: Callable[[int], int]) -> None:
        self.control, self.lag = control, lag
        self.members = [member(0), member(1)]
        self.requests: list[p.Request] = []
        self.delay_s = 0.0
        """Seconds a rank takes to answer a request."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._answer, daemon=True)

    def __enter__(self) -> Ranks:
        self._beat()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _beat(self) -> None:
        for s in self.members:
            s.updated = time.time()
            p.write_json(self.control / f"status-{p.member(s.pid, s.host)}.json", s)

    def _answer(self) -> None:
        while not self._stop.wait(0.01):
            self._beat()
            request = p.read_json(self.control / p.REQUEST, p.Request)
            if request is None or any(r.id == request.id for r in self.requests):
                continue
            self.requests.append(request)
            if self._stop.wait(self.delay_s):
                return
            assert request.start_step is not None  # several processes: one start step for all
            for s in self.members:
                first = request.start_step + s.rank * self.lag(len(self.requests))
                trace = p.capture_dir(self.control, request.id, s.pid, s.host) / "trace.json.gz"
                trace.parent.mkdir(parents=True)
                trace.write_bytes(b"")
                answer = p.Answer(id=request.id, pid=s.pid, host=s.host, rank=s.rank, requested_step=40,
                                  first_step=first, last_step=first + request.steps - 1, trace=str(trace))
                p.write_json(p.answer_path(self.control, request.id, s), answer)


@pytest.fixture
def control(tmp_path: Path) -> Path:
    folder = tmp_path / "control"
    folder.mkdir()
    return folder


def test_ranks_that_recorded_different_steps_are_asked_again_further_ahead(control: Path) -> None:
    with Ranks(control, lag=lambda n: 1 if n == 1 else 0) as ranks:  # the first request: rank 1 read it late
        request, answers, attempts = client.aligned_answers(control, ranks.members, 3, memory=False, timeout_s=30)
    assert attempts == 2 and request.id == ranks.requests[1].id
    assert [(a.rank, a.first_step, a.last_step) for a in answers] == [(r, request.start_step, request.start_step + 2)
                                                                       for r in (0, 1)]
    first, second = ranks.requests
    assert second.start_step > first.start_step  # type: ignore[operator]  # twice the slack, from later heartbeats
    assert not (control / "captures" / first.id).exists() and not list(control.glob(f"done-{first.id}-*"))


def test_ranks_that_never_agree_are_an_error_naming_each_requests_steps(control: Path) -> None:
    with Ranks(control, lag=lambda n: 1) as ranks, pytest.raises(UserError) as error:
        client.aligned_answers(control, ranks.members, 2, memory=False, timeout_s=30)
    assert len(ranks.requests) == client.ALIGN_ATTEMPTS
    starts = [r.start_step for r in ranks.requests]
    assert starts == sorted(starts) and all(f"rank 1 {s + 1}-{s + 2}" in str(error.value) for s in starts)
    assert not list(control.glob("done-*")) and not list(control.glob("captures/*"))


def test_ranks_that_agree_at_once_are_asked_once(control: Path) -> None:
    with Ranks(control, lag=lambda n: 0) as ranks:
        _, answers, attempts = client.aligned_answers(control, ranks.members, 2, memory=False, timeout_s=30)
    assert attempts == 1 and len(ranks.requests) == 1 and answers[0].first_step == answers[1].first_step


def test_the_start_step_is_forecast_from_each_ranks_rate_and_doubles_its_slack() -> None:
    now = 1000.0
    slow, fast = (p.Status(pid=i, host="h", rank=i, control="", signal=None, poll_s=0.5, step=step, updated=now,
                           steps_per_s=rate) for i, (step, rate) in enumerate([(50, 2.0), (40, 20.0)]))
    # the fast rank: 40 + 20 steps/s × (2 × 0.5 s polling + 1 s) = 80, then START_MARGIN_STEPS
    assert client.start_step([slow, fast], now) == 80 + client.START_MARGIN_STEPS
    assert client.start_step([slow, fast], now, slack=2.0) == 40 + 20 * 4 + 2 * client.START_MARGIN_STEPS
    assert client.start_step([fast], now) is None  # one process: its next step


def test_one_timeout_bounds_every_request_and_a_failure_leaves_nothing_in_the_jobs_folder(control: Path) -> None:
    """Ranks that never agree, answering each request later than the last: the second request's wait ends at the
    --timeout counted from the first, and its traces and answers are gone with the error."""
    with Ranks(control, lag=lambda n: 1) as ranks:
        ranks.delay_s = 2.0  # the first request answered at 2 s (apart), the second would be at 4 s
        start = time.monotonic()
        with pytest.raises(UserError) as error:
            client.aligned_answers(control, ranks.members, 2, memory=False, timeout_s=3.0)
        waited = time.monotonic() - start
    assert "no answer" in str(error.value) and len(ranks.requests) == 2
    assert waited < 4.0  # 3 s in all; a new 3 s for the second request would have waited 5 s
    assert not list(control.glob("done-*")) and not list(control.glob("captures/*"))
