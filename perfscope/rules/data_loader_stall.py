from __future__ import annotations

import math
from dataclasses import dataclass, replace

from perfscope.results import DatasetProfile, Finding, KnobOutcome
from perfscope.results.dataset_profile import PROFILE_AT_DATA_WAIT
from perfscope.rules._text import ms, pct
from perfscope.rules.engine import Rule, RuleContext, RuleDoc
from perfscope.stats import confidence_text

MAX_WORKERS = 8
"""The estimate never assumes more workers than the sweep would try."""
MIN_GAIN = 1.05
"""An estimated gain below this is no reason to change the loader: the finding says workers cannot help here."""


@dataclass(frozen=True)
class LoaderEstimate:
    """What k DataLoader workers can win on this machine: step = max(1, threads / cores) · max(compute, load_s / k)
    (the model: docs/rules.md, perfscope/rules/data_loader_stall.py)."""

    step_s: float
    compute_s: float
    load_s: float
    """One batch's loading cost in a worker, on one thread."""
    load_source: str
    """How ``load_s`` is known (profiled on one thread, or inferred from the data wait)."""
    cores: float | None
    """Usable cores (affinity, cgroup quota); None when the run did not record them."""
    cpu_device: bool
    """The compute runs on the CPU, on the same cores as the workers."""
    compute_threads: float
    """Threads of the training process: its torch threads on a CPU run, one on a GPU run."""
    workers: int
    """The workers the estimate assumes: the fewest that reach the best step (0: none can help)."""

    def sharing(self, workers: int) -> float:
        """How much the step stretches when the training process's threads and ``workers`` outnumber the cores."""
        if not self.cores:
            return 1.0
        return max(1.0, (self.compute_threads + workers) / self.cores)

    def step_with(self, workers: int) -> float:
        """The step with ``workers`` workers, per the model (the current step when there are none)."""
        if workers < 1:
            return self.step_s
        return self.sharing(workers) * max(self.compute_s, self.load_s / workers)

    def gain_with(self, workers: int) -> float:
        step = self.step_with(workers)
        return self.step_s / step if step > 0 else 1.0

    @property
    def gain(self) -> float:
        if self.cores is None:  # no core count: only the overlap bound is known
            return self.step_s / self.compute_s if self.compute_s > 0 else math.inf
        return self.gain_with(self.workers)

    @property
    def helps(self) -> bool:
        return self.cores is None or (self.workers >= 1 and self.gain >= MIN_GAIN)

def loader_estimate(ctx: RuleContext, wait_share: float) -> LoaderEstimate:
    """The model's inputs from the baseline run (and its Dataset profile), assuming the fewest workers that reach the
    best step on this machine (`gain_with` gives any other count's)."""
    env = ctx.results.environment
    step = ctx.metrics.mean_step_time_s
    wait = step * wait_share
    current = int(ctx.config("num_workers", 0) or 0)
    profile = ctx.dataset_profile
    cores = env.cpu_cores_usable or env.cpu_cores_physical or env.cpu_cores_logical
    cores = float(cores) if cores else None
    cpu = not ctx.cuda
    if profile is not None and current == 0 and wait > 0 and profile.getitem_one_thread_s and profile.getitem_s:
        # The window's wait is the main process's batch cost, timed over the whole window; the profile's short pass
        # gives how much slower one thread is (both measured side by side, so their ratio survives a drifting machine).
        ratio = profile.getitem_one_thread_s / profile.getitem_s
        load = wait * ratio
        source = (f"profiled: the window's data wait ({ms(wait)} per batch on {profile.threads} thread(s)) × {ratio:.2f}, "
                  "the Dataset's one-thread / main-process cost, as a worker runs it")
    elif profile is not None and profile.batch_one_thread_s is not None:
        load, source = profile.batch_one_thread_s, "profiled: the Dataset's batch on one torch thread, as a worker runs it"
    elif profile is not None:
        load, source = profile.batch_s, "profiled: the Dataset's batch in the main process"
    elif current == 0:
        # With no workers the main process builds each batch while the step waits: the wait is the load.
        load, source = wait, "inferred from the data wait (on the main process's threads; a worker runs one torch thread)"
    else:
        # With n workers still starving the step, they are all busy: each builds a batch per n steps.
        load, source = current * step, f"inferred from the step: {current} busy worker(s) deliver one batch per step"
    threads = (float(profile.threads) if profile is not None and profile.threads else (cores or 1.0)) if cpu else 1.0
    est = LoaderEstimate(step_s=step, compute_s=step - wait, load_s=load, load_source=source, cores=cores,
                         cpu_device=cpu, compute_threads=threads, workers=0)
    if cores is None:
        return replace(est, workers=max(current, 1))
    limit = min(max(int(cores) if cpu else int(cores) - 1, 0), MAX_WORKERS)
    best = max(range(1, limit + 1), key=lambda k: (round(est.gain_with(k), 6), -k), default=0)
    return replace(est, workers=max(best, current) if best else 0)


def profile_lines(profile: DatasetProfile, window_batch_s: float | None) -> list[str]:
    """The Dataset's cost in words: per sample, per batch (main process and worker), and where the time goes;
    ``window_batch_s``: what a batch took in the timed window, for comparison (a short pass is noisier)."""
    one = f" ({ms(profile.getitem_one_thread_s)} on one thread, as in a worker)" if profile.getitem_one_thread_s is not None else ""
    collate = f", collate {ms(profile.collate_s)} per batch" if profile.collate_s is not None else ""
    worker = f" ({ms(profile.batch_one_thread_s)} in a worker)" if profile.batch_one_thread_s is not None else ""
    lines = [f"the Dataset, profiled in the trial process over {profile.samples} samples: __getitem__ {ms(profile.getitem_s)} "
             f"per sample on {profile.threads} thread(s){one}{collate}: a batch of {profile.batch_size} costs {ms(profile.batch_s)}{worker}"
             + (f" (in the timed window the step waited {ms(window_batch_s)} per batch)" if window_batch_s else "")]
    if profile.top:
        where = ", ".join(f"{f.label} {pct(f.self_share)}" for f in profile.top[:4])
        lines.append(f"where __getitem__ and collate spend their time (cProfile self time): {where}")
    return lines


class DataLoaderStall(Rule):
    """The step waits for data: load batches in DataLoader workers.

    Anti-pattern: decoding and augmenting samples in the training process (num_workers=0), so the device
    idles while the next batch is built. Best practice: `num_workers` > 0 with `persistent_workers=True`
    and a `prefetch_factor` that covers the slowest batch; move heavy transforms off the critical path.
    Workers only overlap loading with compute on cores of their own: on a machine with few usable cores
    (affinity, cgroup quota) the Dataset's own per-sample cost is what to cut. When the step waits for data,
    perfscope profiles the Dataset in the trial process (N samples, cProfile) and shows where `__getitem__`
    and collate spend their time.
    """

    id = "PS201"
    name = "data-loader-stall"
    doc = RuleDoc(
        detects="the step waits for data",
        threshold="data wait ≥ 10 % of the step",
        evidence="data-wait share; the Dataset profiled in the trial (per-sample cost on the training's threads and on one "
                 "thread, collate, top functions by cProfile self time); usable cores (affinity, cgroup quota)",
        fix="DataLoader with the run's batch and the estimate's worker count; options measured as no better left out; when "
            "workers cannot help, the Dataset's hottest functions",
        gain="measured (`dataloader_workers`); else estimated: step / (max(compute, batch cost in a worker / k) × max(1, "
             "(training threads + k) / cores)), the fewest k reaching the best; bound: the usable cores the training's "
             "threads and the workers share",
        guard="no estimate below 1.05×; says when workers cannot close the gap, and why (the cores)",
    )
    groups = ("input",)
    knobs = ("dataloader_workers",)
    addresses = ("data_wait",)
    threshold: float = PROFILE_AT_DATA_WAIT
    """Fire when at least this share of each step is spent blocked on the data iterator (the trial profiles the
    Dataset from the same share on)."""

    def check(self, ctx: RuleContext) -> list[Finding]:
        # The timed steps' own measure first; the trace's (profiled, slower steps) when the loop could not time it.
        wait = ctx.metrics.data_wait_share or (ctx.facts.data_wait_fraction if ctx.facts else 0.0)
        if wait < self.threshold:
            return []
        median = ctx.metrics.typical_step.median if ctx.metrics.typical_step else ctx.metrics.mean_step_time_s
        est = loader_estimate(ctx, wait)
        batch = ctx.metrics.samples_per_step // max(ctx.metrics.grad_accum_steps, 1) or 1
        env = ctx.results.environment
        profile = ctx.dataset_profile
        evidence = [f"{pct(wait)} of each step is spent blocked on the data iterator (median step {ms(median)})"]
        if profile is not None:
            same_batch = profile.batch_size == batch and int(ctx.config("num_workers", 0) or 0) == 0
            evidence += profile_lines(profile, est.step_s * wait if same_batch else None)
        else:
            # A trace records neither the batch nor the loader's settings (samples_per_step 0, settings unknown).
            workers = "" if "num_workers" in ctx.baseline.unknown_settings else f"num_workers={ctx.config('num_workers', 0)}; "
            per_sample = f"{ms(est.load_s / batch)} per sample, batch {batch}; " if ctx.metrics.samples_per_step else ""
            evidence.append(f"{workers}building one batch costs {ms(est.load_s)} of one core ({per_sample}{est.load_source})")
        how = f" ({env.cpu_cores_usable_how})" if env.cpu_cores_usable_how else ""
        if est.cores is not None and not est.helps:
            k = max(est.workers, 1)
            evidence.append(
                f"workers cannot close the gap on this machine: {k} worker(s) deliver a batch every {ms(est.load_s / k)} "
                f"while the compute takes {ms(est.compute_s)}" + (f", and with {est.compute_threads:g} training thread(s) and {k} "
                f"worker(s) on {est.cores:g} core(s) everything runs {est.sharing(k):.2f}× slower" if est.sharing(k) > 1 else "")
                + f": a step of about {ms(est.step_with(k))} against {ms(est.step_s)} now; cut the Dataset's own cost "
                "(__getitem__, transforms, collate)")
        helps = est.helps
        title = ("The step waits for data: add DataLoader workers" if helps
                 else "The step waits for data: the Dataset is too slow for this machine's cores")
        finding = Finding(
            rule_id=self.id, title=title, severity="high" if wait >= 0.3 else "medium", evidence=evidence, cause_share=wait,
            # Workers are the fix only where they can help (or were measured helping); else the Dataset's own cost is.
            fix=self.fix_text(ctx, batch, est.workers) if helps or ctx.won("dataloader_workers") else self.dataset_fix(profile),
            estimated_gain=est.gain if helps else None,
            estimate_method=self.method(est) if helps else None, upper_bound=helps and est.cores is None,
            estimate_bound=self.bound(est, how) if helps else None,
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
            rule_id=self.id, title="The step waits for data: the Dataset is too slow for this machine's cores",
            severity=finding.severity, cause_share=wait,
            evidence=evidence + [f"DataLoader workers measured here: {g.ratio:.2f}× ({confidence_text(g.confidence)} CI {g.low:.2f}–{g.high:.2f}), "
                                 "not a speed-up; cut the Dataset's own cost (__getitem__, transforms, collate)"],
            fix=self.dataset_fix(profile),
            reference="https://pytorch.org/docs/stable/data.html#multi-process-data-loading",
        )
        return [diagnosis, measured]

    @staticmethod
    def method(est: LoaderEstimate) -> str:
        if est.cores is None:
            return ("loading fully overlapped: 1 / (1 − data-wait share); the run did not record "
                    "its usable cores, so the bound ignores them")
        return (f"step / (max(compute, batch cost / workers) × max(1, threads / cores)) with {est.workers} worker(s); batch cost "
                f"{ms(est.load_s)} ({est.load_source}); assumes each worker builds whole batches on one thread, the compute "
                "keeps its speed, and oversubscribed cores are shared fairly")

    @staticmethod
    def bound(est: LoaderEstimate, how: str) -> str:
        if est.cores is None:
            return "the compute: the step cannot be shorter than its non-waiting part"
        who = f"the training process's {est.compute_threads:g} torch thread(s)" if est.cpu_device else "the training process (one core to launch work)"
        return (f"{est.cores:g} usable core(s){how}, shared by {who} and {est.workers} worker(s) "
                f"(×{est.sharing(est.workers):.2f} when they outnumber the cores); a step takes at least the compute's {ms(est.compute_s)}")

    @staticmethod
    def dataset_fix(profile: DatasetProfile | None) -> str:
        """What to change in the Dataset: its hottest functions when profiled, else how to profile it."""
        if profile is None or not profile.top:
            return ("+import cProfile, pstats\n"
                    "+cProfile.run('[ds[i] for i in range(256)]', 'getitem.prof')   # where __getitem__ spends its time\n"
                    "+pstats.Stats('getitem.prof').sort_stats('cumtime').print_stats(15)")
        hot = ", ".join(f"{f.label} ({pct(f.self_share)})" for f in profile.top[:2])
        return (f" # the Dataset's time goes to {hot}\n"
                " def __getitem__(self, i):\n"
                "-    return transform(decode(self.items[i]))      # the heavy work, again for every sample in every epoch\n"
                "+    return self.cache[i]                         # precomputed once (or move the transform to the batch, on the device)")

    def fix_text(self, ctx: RuleContext, batch: int, workers: int) -> str:
        """The loader line with this run's batch and worker count; options the sweep measured as no better are left out."""
        outcome = ctx.won("dataloader_workers")
        if outcome is not None and outcome.setting:
            digits = "".join(ch for ch in outcome.setting if ch.isdigit())
            workers = int(digits) if digits else workers
        options = [f"num_workers={max(workers, 1)}"]
        for knob, text in (("persistent_workers", "persistent_workers=True"), ("prefetch_factor", "prefetch_factor=4")):
            o = ctx.knob(knob)
            if o is None or o.status != "measured" or (o.gain is not None and o.gain.faster):
                options.append(text)
        size = batch if ctx.metrics.samples_per_step else "B"  # B: a batch the results do not know (a trace)
        return f"-loader = DataLoader(ds, batch_size={size})\n+loader = DataLoader(ds, batch_size={size}, {', '.join(options)})"

    def why_not_here(self, ctx: RuleContext, outcome: KnobOutcome) -> str | None:
        env = ctx.results.environment
        usable = env.cpu_cores_usable or env.cpu_cores_physical
        if not ctx.cuda and usable is not None:
            return (f"on a CPU run the workers share this machine's {usable:g} usable core(s) with the training's own threads: "
                    "what they speed up in loading they take from the compute; more cores, or a cheaper Dataset, would gain")
        if usable is not None and usable - 1 < 2:
            return (f"this machine leaves {max(usable - 1, 0):g} core(s) for workers beside the training process: loading "
                    "cannot overlap much with compute; a machine with more free cores, or a cheaper Dataset, would gain")
        return "the workers compete with the training process for the CPU; a cheaper Dataset (__getitem__, collate) is what to cut"
