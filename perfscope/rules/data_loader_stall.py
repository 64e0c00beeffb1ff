from __future__ import annotations

from dataclasses import dataclass

from perfscope.results import Finding, KnobOutcome
from perfscope.rules._text import ms, pct
from perfscope.rules.engine import Rule, RuleContext


@dataclass(frozen=True)
class LoaderEstimate:
    """What DataLoader workers can win on this machine, from the step's data wait and the cores left for workers.

    Model: a batch costs ``load_s`` of one core to build. With k workers, each on a core of its own, a batch
    is ready every load_s / k; the step cannot be shorter than its compute. So the step becomes
    max(compute, load_s / k), and the gain is step / that, never above 1 / (1 − data-wait share).
    """

    step_s: float
    compute_s: float
    load_s: float
    """One batch's loading cost on one core (with 0 workers: the measured wait; with n: n × the step)."""
    free_cores: float | None
    """Cores left for workers: usable cores − 1 for the training process; None when the run did not record them."""
    workers: int
    """The workers the estimate assumes (≤ the free cores)."""

    @property
    def gain(self) -> float:
        upper = self.step_s / self.compute_s if self.compute_s > 0 else float("inf")
        if self.free_cores is None:
            return upper
        if self.workers < 1:
            return 1.0
        return min(upper, self.step_s / max(self.compute_s, self.load_s / self.workers))

    @property
    def closes_gap(self) -> bool:
        """Whether the assumed workers bring batches as fast as the step computes them."""
        return self.workers >= 1 and self.load_s / self.workers <= self.compute_s


def loader_estimate(ctx: RuleContext, wait_share: float) -> LoaderEstimate:
    env = ctx.results.environment
    step = ctx.metrics.mean_step_time_s
    wait = step * wait_share
    current = int(ctx.config("num_workers", 0) or 0)
    # With no workers the main process builds each batch while the step waits: the wait is the load.
    # With n workers still starving the step, they are all busy: each builds a batch per n steps.
    load = wait if current == 0 else current * step
    usable = env.cpu_cores_usable or env.cpu_cores_physical or env.cpu_cores_logical
    free = max(usable - 1.0, 0.0) if usable else None
    workers = int(free) if free is not None else 0
    return LoaderEstimate(step_s=step, compute_s=step - wait, load_s=load, free_cores=free, workers=max(workers, current))


@dataclass
class DataLoaderStall(Rule):
    """The step waits for data: load batches in DataLoader workers.

    Anti-pattern: decoding and augmenting samples in the training process (num_workers=0), so the device
    idles while the next batch is built. Best practice: `num_workers` > 0 with `persistent_workers=True`
    and a `prefetch_factor` that covers the slowest batch; move heavy transforms off the critical path.
    Workers only overlap loading with compute on cores of their own: on a machine with few usable cores
    (affinity, cgroup quota) the Dataset's own per-sample cost is what to cut.
    """

    id = "PS201"
    name = "data-loader-stall"
    groups = ("input",)
    knobs = ("dataloader_workers",)
    threshold: float = 0.10
    """Fire when at least this share of each step is spent blocked on the data iterator."""

    def check(self, ctx: RuleContext) -> list[Finding]:
        # The timed steps' own measure first; the trace's (profiled, slower steps) when the loop could not time it.
        wait = ctx.metrics.data_wait_share or (ctx.facts.data_wait_fraction if ctx.facts else 0.0)
        if wait < self.threshold:
            return []
        median = ctx.metrics.typical_step.median if ctx.metrics.typical_step else ctx.metrics.mean_step_time_s
        est = loader_estimate(ctx, wait)
        batch = ctx.metrics.samples_per_step // max(ctx.metrics.grad_accum_steps, 1) or 1
        env = ctx.results.environment
        evidence = [f"{pct(wait)} of each step is spent blocked on the data iterator (median step {ms(median)})",
                    f"num_workers={ctx.config('num_workers', 0)}; building one batch costs {ms(est.load_s)} of one core "
                    f"({ms(est.load_s / batch)} per sample, batch {batch})"]
        if est.free_cores is not None:
            how = f" ({env.cpu_cores_usable_how})" if env.cpu_cores_usable_how else ""
            evidence.append(f"{est.free_cores:g} core(s) free for workers: usable cores − 1 for the training process{how}")
        if est.free_cores is not None and not est.closes_gap:
            per_batch = est.load_s / est.workers if est.workers else est.load_s
            evidence.append(
                f"workers cannot close the gap on this machine: with {est.workers} worker(s) a batch is ready every {ms(per_batch)} "
                f"while the compute takes {ms(est.compute_s)}; cut the Dataset's own cost (__getitem__, transforms, collate)")
        title = ("The step waits for data: add DataLoader workers" if est.closes_gap or est.free_cores is None
                 else "The step waits for data: the Dataset is too slow for this machine's free cores")
        if est.free_cores is None:
            method = ("upper bound if loading were fully overlapped, 1 / (1 − data-wait share); the run did not record "
                      "its usable cores, so the bound ignores them")
        else:
            method = (f"step / max(compute, batch cost / workers) with {est.workers} worker(s) on {est.free_cores:g} free core(s); "
                      "assumes each worker gets a core of its own and the compute keeps its speed"
                      + (" (on a CPU run workers take cores from torch's threads: an upper bound)" if not ctx.cuda else ""))
        finding = Finding(
            rule_id=self.id, title=title, severity="high" if wait >= 0.3 else "medium", evidence=evidence,
            fix=self.fix_text(ctx, batch, est.workers),
            estimated_gain=est.gain if est.gain > 1.0 else None,
            estimate_method=method if est.gain > 1.0 else None,
            reference="https://pytorch.org/docs/stable/data.html#multi-process-data-loading",
        )
        measured = self.measured(ctx, finding, "dataloader_workers")
        if not measured.measured_no_help:
            return [measured]
        # Workers measured as no help: that fix goes to "did not help here", but the diagnosis stands — the
        # step still waits for data, and what is left to change is the Dataset's own cost.
        g = measured.gain
        assert g is not None
        diagnosis = Finding(
            rule_id=self.id, title="The step waits for data: the Dataset is too slow for this machine's free cores",
            severity=finding.severity,
            evidence=evidence + [f"DataLoader workers measured here: {g.ratio:.2f}× ({g.confidence:.0%} CI {g.low:.2f}–{g.high:.2f}), "
                                 "not a speed-up; cut the Dataset's own cost (__getitem__, transforms, collate)"],
            fix=("+import cProfile, pstats\n"
                 "+cProfile.run('[ds[i] for i in range(256)]', 'getitem.prof')   # where __getitem__ spends its time\n"
                 "+pstats.Stats('getitem.prof').sort_stats('cumtime').print_stats(15)"),
            reference="https://pytorch.org/docs/stable/data.html#multi-process-data-loading",
        )
        return [diagnosis, measured]

    def fix_text(self, ctx: RuleContext, batch: int, workers: int) -> str:
        """The loader line with this run's batch and worker count; options the sweep measured as no better are left out."""
        outcome = ctx.knob("dataloader_workers")
        if outcome is not None and outcome.status == "measured" and outcome.setting and outcome.gain and outcome.gain.faster:
            digits = "".join(ch for ch in outcome.setting if ch.isdigit())
            workers = int(digits) if digits else workers
        options = [f"num_workers={max(workers, 1)}"]
        for knob, text in (("persistent_workers", "persistent_workers=True"), ("prefetch_factor", "prefetch_factor=4")):
            o = ctx.knob(knob)
            if o is None or o.status != "measured" or (o.gain is not None and o.gain.faster):
                options.append(text)
        return f"-loader = DataLoader(ds, batch_size={batch})\n+loader = DataLoader(ds, batch_size={batch}, {', '.join(options)})"

    def why_not_here(self, ctx: RuleContext, outcome: KnobOutcome) -> str | None:
        env = ctx.results.environment
        usable = env.cpu_cores_usable or env.cpu_cores_physical
        if usable is not None and usable - 1 < 2:
            return (f"this machine leaves {max(usable - 1, 0):g} core(s) for workers beside the training process: loading "
                    "cannot overlap much with compute; a machine with more free cores, or a cheaper Dataset, would gain")
        return "the workers compete with the training process for the CPU; a cheaper Dataset (__getitem__, collate) is what to cut"
