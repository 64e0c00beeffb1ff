from __future__ import annotations

from perfscope.results import Finding
from perfscope.rules._text import pct
from perfscope.rules.engine import Rule, RuleContext, RuleDoc, up_to
from perfscope.snippets import compile_change


class LaunchBound(Rule):
    """The step is launch-bound: many tiny kernels, the GPU waits for the host to launch them.

    Anti-pattern: small matmuls and elementwise ops each cost a 5–20 µs CPU launch, longer than the kernel
    itself, so the GPU idles between kernels. Best practice: CUDA graphs (`torch.compile(mode="reduce-overhead")`),
    kernel fusion (`torch.compile`), or a larger batch so each kernel does more work.
    """

    id = "PS301"
    name = "launch-bound"
    doc = RuleDoc(
        detects="many tiny kernels, GPU starved",
        threshold="trace's launch-bound flag",
        evidence="kernels/step, median kernel time, starved share, the ops whose launches the GPU waited for",
        fix='CUDA graphs (`torch.compile(mode="reduce-overhead")`); on a CPU, compile or a larger batch',
        gain="measured (`compile_reduce_overhead`; CPU: `compile`); else estimated on a GPU: 1 / (1 − launch-idle share); "
             "bound: the GPU's own time (kernels + the idle launches do not cause)",
        guard='a CUDA trace with GPU kernels and launch idle (no finding with 0 % launch idle); the estimate is an upper '
              'bound, worded "up to"',
    )
    groups = ("host",)
    knobs = ("compile_reduce_overhead",)
    addresses = ("launch",)

    def check(self, ctx: RuleContext) -> list[Finding]:
        facts = ctx.facts
        if facts is None or not facts.launch.launch_bound:
            return []
        launch = facts.launch
        if ctx.cuda and (facts.gpu is None or not launch.kernels_per_step or not launch.starved_fraction):
            return []  # no GPU kernels or no launch idle in the trace: nothing backs a launch-bound claim
        if not ctx.cuda:
            return [self.measured(ctx, Finding(
                rule_id=self.id, title="Dispatch-bound step: many tiny ops — compile them or raise the batch", severity="high",
                evidence=[f"{launch.kernels_per_step:.0f} aten ops per step, median self time {launch.median_kernel_us or 0:.1f} µs: "
                          "framework overhead, not arithmetic, sets the step time"],
                fix=compile_change(ctx.device) + "   # or a larger batch: more work per op",
                reference="https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html",
                addresses=["host", "elementwise"],
            ), "compile")]
        finding = Finding(
            rule_id=self.id, title="Launch-bound step: use CUDA graphs (compile reduce-overhead) or a larger batch", severity="high",
            evidence=[f"{launch.kernels_per_step:.0f} kernels per step, median {launch.median_kernel_us or 0:.1f} µs",
                      f"the GPU sits idle waiting for the host's launches {pct(launch.starved_fraction or 0.0)} of the step "
                      f"(GPU idle {pct(facts.gpu.idle_fraction if facts.gpu else 0.0)} in all); "
                      f"host launch calls {(launch.host_launch_s or 0.0) * 1e3:.2f} ms per step"]
            + (["the GPU waited for work launched by: " + ", ".join(f"{op} {s * 1e3:.2f} ms" for op, s in launch.starved_by.items())
                + " per step"] if launch.starved_by else []),
            fix=compile_change(ctx.device, "reduce-overhead"),
            reference="https://pytorch.org/docs/stable/torch.compiler_cudagraph_trees.html",
        )
        starved, busy = launch.starved_fraction or 0.0, facts.gpu.busy_fraction if facts.gpu else None
        up_to(finding, starved,  # the cause measured in the trace: the GPU idle waiting on the host's launches
              "step / (step − launch idle): CUDA graphs replay the step's kernels without host launches, so the "
              "GPU's idle time waiting on them goes; assumes the kernels keep their durations and the step can be captured "
              "(static shapes, no host sync inside)",
              f"the GPU's own time: {pct(1.0 - starved)} of the step is not launch idle"
              + (f" (kernels busy {pct(busy)})" if busy is not None else "")
              + "; the step cannot be shorter than its kernels and the idle the launches do not cause")
        return [self.measured(ctx, finding, "compile_reduce_overhead")]
