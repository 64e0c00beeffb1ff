"""The ranked fixes as the report shows them: one FindingView per perfscope.ranking.RankedFix, in its order.

The ranking decides the order, what is recommended, and what is measured or estimated; this module words each
item (gain, interval, diff lines, the slices of the baseline's step it acts on, the Dataset's cost).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from perfscope.ranking import Evidence, RankedFix
from perfscope.report.format import Cell, Table, fmt_percent, fmt_seconds, gain_text
from perfscope.report.headline import Story, interval_words
from perfscope.results import Finding, Gain, Results, Trial
from perfscope.results.breakdown import WHOLE_STEP, StepSlice, addressed
from perfscope.results.roles import dataset_profile
from perfscope.wording import words


@dataclass(kw_only=True, slots=True)
class DiffLine:
    kind: str  # "add" | "del" | "hunk" | "ctx"
    text: str


@dataclass(kw_only=True, slots=True)
class FindingView:
    rank: int
    rule_id: str
    title: str
    severity: str
    gain_kind: str  # "measured" | "estimated" | "not quantified"
    gain_text: str  # "1.42× faster", "≈1.30× faster" or, for an upper bound, "up to 5.3× faster"
    interval: str  # "95 % CI [1.35, 1.50]" (measured only)
    estimate_method: str
    evidence: list[str]
    fix: list[DiffLine]
    caveats: list[str]
    reference_url: str | None  # only http(s) links become anchors
    reference_text: str
    trial: str
    why_not_here: str = ""  # measured and did not help: the rule's account of why
    recommended: bool = False  # this item is what the headline recommends
    estimate_bound: str = ""  # the machine limit that bounds the estimate (or how far the fix can go)
    addresses_keys: list[str] = field(default_factory=list)  # slices of the baseline's step breakdown it acts on
    addresses: str = ""  # those slices in words, with their time: "data wait: 57.0 ms, 72 % of the baseline's step"
    dataset_cost: Table | None = None  # the data-loader finding: where the Dataset's time goes, per sample
    dataset_cost_caption: str = ""


def diff_lines(fix: str) -> list[DiffLine]:
    """Classify a fix's lines the way a diff viewer would (the text itself is kept verbatim)."""
    def kind(line: str) -> str:
        if line.startswith(("+++", "---")):
            return "ctx"
        return "add" if line[:1] == "+" else "del" if line[:1] == "-" else "hunk" if line.startswith("@@") else "ctx"

    return [DiffLine(kind=kind(line), text=line) for line in fix.rstrip("\n").splitlines()]


def _finding_view(rank: int, f: Finding, evidence: Evidence, gain: Gain | None) -> FindingView:
    """One finding, its number worded as the ranking classed it (``gain``: the measured gain the report shows)."""
    if evidence is Evidence.MEASURED and gain is not None:
        text, interval = gain_text(gain.ratio), interval_words(gain)
    elif evidence is Evidence.ESTIMATED and f.estimated_gain is not None:
        # A bound is worded as one: "up to 5.3× faster", never a promise of 5.3×.
        text, interval = ("up to " if f.upper_bound else "≈") + gain_text(f.estimated_gain), ""
    else:
        text, interval = "", ""
    ref = f.reference or ""
    return FindingView(
        rank=rank, rule_id=f.rule_id, title=f.title, severity=f.severity, gain_kind=evidence.value, gain_text=text,
        interval=interval, estimate_method=(f.estimate_method or "") if evidence is Evidence.ESTIMATED else "",
        evidence=list(f.evidence), fix=diff_lines(f.fix) if f.fix else [], caveats=[words(c) for c in f.caveats],
        reference_url=_link(ref), reference_text=ref, trial=f.trial or "", why_not_here=f.why_not_here or "",
        estimate_bound=f.estimate_bound or "", addresses_keys=list(f.addresses),
    )


def _link(ref: str | None) -> str | None:
    """Only http(s) references become anchors."""
    return ref if ref and ref.startswith(("https://", "http://")) else None


def _recommended_view(fix: RankedFix, story: Story | None) -> FindingView:
    """The recommendation, with the headline's gain (all its runs). One knob: that knob's finding; a stack: one
    item "apply together" with each knob's fix and its gain alone, the knobs' own findings folded into it."""
    rec, mine = fix.recommendation, list(fix.findings)
    assert rec is not None
    option = story.recommended if story is not None else None
    label = option.label if option is not None else " + ".join(rec.knobs)
    caveats = list(option.caveats) if option is not None else []
    if len(rec.knobs) == 1 and mine:
        view = _finding_view(fix.rank, mine[0], Evidence.MEASURED, rec.gain)
        view.trial = rec.configuration
    else:
        fixes = "\n".join(f.fix for f in mine if f.fix)
        evidence = [line for f in mine for line in
                    ([f"{f.title}: alone {gain_text(f.gain.ratio)} ({interval_words(f.gain)})"] if f.gain else [f.title]) + f.evidence]
        refs = [link for f in mine if (link := _link(f.reference))]
        view = FindingView(rank=fix.rank, rule_id=", ".join(dict.fromkeys(f.rule_id for f in mine)) or "sweep",
                           title=("Apply together: " if len(rec.knobs) > 1 else "") + label, severity="high",
                           gain_kind=Evidence.MEASURED.value, gain_text=gain_text(rec.gain.ratio), interval=interval_words(rec.gain),
                           estimate_method="", evidence=evidence, fix=diff_lines(fixes) if fixes else [],
                           caveats=list(dict.fromkeys(caveats + [words(c) for f in mine for c in f.caveats])),
                           reference_url=refs[0] if refs else None, reference_text=refs[0] if refs else "",
                           trial=rec.configuration, addresses_keys=list(dict.fromkeys(k for f in mine for k in f.addresses)))
    view.recommended = True
    return view


def fix_views(fixes: list[RankedFix], story: Story | None = None) -> list[FindingView]:
    """The ranked fixes (or the measured-but-no-help list) in the ranking's order, numbered by its ranks."""
    views = []
    for fix in fixes:
        if fix.recommended:
            views.append(_recommended_view(fix, story))
        elif fix.finding is not None:
            views.append(_finding_view(fix.rank, fix.finding, fix.evidence, fix.gain))
    return views


def addresses_words(slices: list[StepSlice], keys: list[str]) -> str:
    """The slices a fix acts on, with their time in the baseline's step ("" when it acts on none of it)."""
    hit = addressed(slices, keys)
    if not hit:
        return ""
    step = sum(s.seconds for s in slices)
    if WHOLE_STEP in keys:
        return f"the whole step: {fmt_seconds(step)} (each sample's share of every slice)"
    seconds = sum(s.seconds for s in hit)
    return f"{' + '.join(s.label for s in hit)}: {fmt_seconds(seconds)}, {seconds / step * 100:.0f} % of the baseline's step"


def why_line(slices: list[StepSlice], views: list[FindingView]) -> str:
    """Why the baseline is slow, in one line: its largest slice of the step, and the first ranked fix acting on it."""
    if not slices:
        return ""
    top = max(slices, key=lambda s: s.seconds)
    if top.key == "compute" or top.share < 0.25:
        return ""  # an unsplit or spread-out step says nothing a reader can act on
    fix = next((v for v in views if top in addressed(slices, v.addresses_keys) and WHOLE_STEP not in v.addresses_keys), None)
    where = f" — fix #{fix.rank} addresses it: {fix.title}" if fix else ""
    return f"{top.label} is {top.share * 100:.0f} % of the baseline's step ({fmt_seconds(top.seconds)} of {fmt_seconds(sum(s.seconds for s in slices))}){where}"


def breakdown_table(slices: list[StepSlice], marks: dict[str, list[int]]) -> Table:
    """The baseline's step by slice (the first chart, as a table), each with the ranked fixes that act on it."""
    table = Table(header=["Slice", "Per step", "Share", "Ranked fixes acting on it"], align="lrrl")
    for s in slices:
        table.add(s.label, fmt_seconds(s.seconds), f"{s.share * 100:.0f} %", ", ".join(f"#{r}" for r in marks.get(s.key, [])) or "—")
    return table


def point_at_breakdown(views: list[FindingView], slices: list[StepSlice]) -> dict[str, list[int]]:
    """Fill each ranked fix's `addresses` and return slice key -> the ranks of the fixes that act on it."""
    marks: dict[str, list[int]] = {}
    for v in views:
        v.addresses = addresses_words(slices, v.addresses_keys)
        if WHOLE_STEP in v.addresses_keys:
            continue  # every slice: marking them all would say nothing
        for s in addressed(slices, v.addresses_keys):
            marks.setdefault(s.key, []).append(v.rank)
    return marks


def dataset_cost(view: FindingView, results: Results, trial: Trial | None) -> None:
    """The data-loader finding carries the baseline's Dataset profile as a table (perfscope.results.dataset_profile)."""
    profile = dataset_profile(results, trial) if trial is not None else None
    if view.rule_id != "PS201" or profile is None or not profile.top:
        return
    n = max(profile.samples, 1)
    view.dataset_cost = Table(header=["Function", "Share", "Self / sample", "With callees / sample", "Calls / sample"], align="lrrrr")
    for f in (f for i, f in enumerate(profile.top) if i < 3 or f.self_share >= 0.005):  # slivers say nothing
        view.dataset_cost.add(Cell(text=f.label, code=True), fmt_percent(f.self_share, 0), fmt_seconds(f.self_s / n),
                              fmt_seconds(f.cumulative_s / n), f"{f.calls / n:.3g}")
    view.dataset_cost_caption = (f"Where __getitem__ and collate spend their time: {profile.samples} samples of the Dataset profiled in the "
                                 f"trial process (cProfile; times per sample, the profiler's overhead included)")
