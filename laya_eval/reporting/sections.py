"""The content of a report, as blocks (see :mod:`laya_eval.reporting.render`) built from its tables.

Every number is formatted from the tables as written to CSV. Summaries come first (one
combined table across runs, figures); per-run tables sit in collapsed ``<details>``; a
section without content is left out.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import pandas as pd

from laya_eval.figures import RHO_BANDS, method_label
from laya_eval.reporting.operator_sections import OPERATORS_TITLE, find_operator_tables, operator_blocks
from laya_eval.reporting.render import _ci, _num, _slug
from laya_eval.catalog import in_registry_order
from laya_eval.stats import ALPHA
from laya_eval.reporting.runs import Run
from laya_eval.reporting.seeds import ACROSS_KEYS
from laya_eval.reporting.tables import RHO_ONE_TOL, ReportTables

__all__ = ["SECTIONS", "combined_cell"]

SECTIONS = {
    "runs": "Runs",
    "methods": "Methods",
    "summary": "Summary across runs",
    "significance": "Significance between methods",
    "sanity": "Sanity checks",
    "scores": "Faithfulness and Deletion@1 per run",
    "tests": "Paired tests between methods",
    "curves": "Deletion@k curves",
    "spearman": "Per-sample Spearman rho",
    "scatter": "Attribution vs effect",
    "agreement": "Method agreement",
    "operators": OPERATORS_TITLE,
}

_INTRO = (
    "Faithfulness is the mean over samples of the Spearman correlation ρ between a method's layer scores and the "
    "leave-one-layer-out effects ({effect} when one layer is removed). "
    "Deletion@k is the mean {change} after removing the k layers the method ranks highest. Higher is better for both. "
    "Intervals are 95% percentile bootstrap intervals over samples; a sample whose attribution or effect is "
    "constant across layers has an undefined ρ: it is counted ('undefined') and left out of the means."
)
#: What an effect is, in words and in a heading, for classifier runs and for next-token runs of a language model.
_EFFECTS = {
    False: ("the drop of the predicted class's probability", "drop", "drop of p(predicted class)"),
    True: ("the rise of the mean next-token loss, in nats", "rise of the loss", "rise of the next-token loss, nats"),
}


def _effect_words(runs: Sequence[Run]) -> tuple[str, str, str]:
    """The effect's words for these runs (both kinds named where classifier and next-token runs are mixed)."""
    kinds = {(r.manifest.get("target") or {}).get("option") == "next-token" for r in runs}
    if len(kinds) == 1:
        return _EFFECTS[kinds.pop()]
    both = zip(*(_EFFECTS[False], _EFFECTS[True]))
    return tuple(f"for classifiers {a}, for language models {b}" for a, b in both)


def combined_cell(mean, std, low, high, n_runs: int, note=None) -> str:
    """``mean ± std [low, high]`` for several runs, ``mean [low, high]`` for one (``n/a (reason)`` for a
    missing interval), ``—`` when absent."""
    if pd.isna(mean):
        return "—"
    spread = f" ± {_num(std)}" if n_runs > 1 else ""
    return f"{_num(mean)}{spread} {_ci(low, high, note)}"


def _group_names(across: pd.DataFrame) -> dict[tuple, str]:
    """Column label per (head, dataset, ablation, scope): the head, plus whatever else varies."""
    groups = across[ACROSS_KEYS[:-1]].drop_duplicates()
    varying = [k for k in ACROSS_KEYS[1:-1] if groups[k].nunique() > 1]
    n_runs = across.groupby(ACROSS_KEYS[:-1], sort=False)["n_runs"].max()
    out = {}
    for row in groups.itertuples(index=False):
        key = tuple(row)
        extra = " · ".join(str(getattr(row, k)) for k in varying)
        runs = int(n_runs.loc[key])
        out[key] = f"{row.head}{' · ' + extra if extra else ''} ({runs} run{'s' if runs > 1 else ''})"
    return out


def _combined_table(across: pd.DataFrame, metric: str) -> tuple:
    """Methods (rows) x run groups (columns), one cell per (method, group)."""
    names = _group_names(across)
    methods = in_registry_order(across["method"])
    cells = {(tuple(r[:4]), r[4]): r for r in across.itertuples(index=False, name=None)}
    cols = list(across.columns)
    rows = []
    for m in methods:
        row = [method_label(m)]
        for key in names:
            r = cells.get((key, m))
            if r is None:
                row.append("—")
                continue
            get = dict(zip(cols, r)).get
            row.append(
                combined_cell(
                    get(f"{metric}_mean"),
                    get(f"{metric}_std"),
                    get(f"{metric}_ci_low"),
                    get(f"{metric}_ci_high"),
                    int(get("n_runs")),
                    get(f"{metric}_ci_note"),
                )
            )
        rows.append(row)
    return ("table", ["method", *names.values()], rows)


def _per_run(runs: Sequence[Run], table: pd.DataFrame, header: list[str], row_fn) -> list[tuple]:
    blocks = []
    for r in runs:
        part = table[table["run"] == r.label]
        if part.empty:  # e.g. a run without paired tests: no empty block
            continue
        blocks += [
            ("details", r.label, len(runs) == 1),
            ("table", header, [row_fn(row) for row in part.itertuples(index=False)]),
            ("end_details",),
        ]
    return blocks


def _summary(t: ReportTables, figure, runs: Sequence[Run]) -> list[tuple]:
    from laya_eval.reporting.trust_sections import seed_blocks

    several = bool((t.across_runs["n_runs"] > 1).any())
    note = (
        (
            "Cells: mean ± std over the runs that share head, dataset, ablation and scope (e.g. training seeds), "
            "then the 95% Student t interval of that mean; a single run shows its value and its 95% bootstrap "
            "interval over samples. — : the method does not apply to that head. Below the figure, for each such "
            "group of runs: a paired test across runs and each method's rank per run."
        )
        if several
        else (
            "Cells: the run's value and its 95% bootstrap interval over samples. — : the method does not apply "
            "to that head."
        )
    )
    return [
        ("h2", SECTIONS["summary"]),
        ("p", note),
        ("h3", "Faithfulness (mean Spearman ρ)"),
        _combined_table(t.across_runs, "faithfulness"),
        ("h3", f"Deletion@1 ({_effect_words(runs)[2]})"),
        _combined_table(t.across_runs, "deletion_at_1"),
        figure("faithfulness", "Faithfulness and Deletion@1 per method and run, with 95% intervals."),
        *seed_blocks(t.across_seeds, t.seed_ranks),
    ]


def _tests(runs: Sequence[Run], t: ReportTables) -> list[tuple]:
    if t.comparisons.empty:
        return []
    header = [
        "metric",
        "method a",
        "method b",
        "n",
        "mean(a − b)",
        "95% CI",
        "Wilcoxon W",
        "p",
        "p (Holm)",
        "Holm family",
        "rank-biserial",
        "note",
    ]
    return [
        ("h2", SECTIONS["tests"]),
        (
            "p",
            "Paired over samples: Wilcoxon signed-rank test of method a against method b. Each metric's tests form "
            "one Holm family: by default every method against the run's reference method (`--reference`; all pairs "
            "with `--reference all`), so a method added to a run adds one test and leaves the reference's other "
            "tests in the same family; the family and its size are given beside every adjusted p. The interval is "
            "a 95% bootstrap interval of the mean difference, not adjusted for the family: where it and the Holm "
            f"decision (p < {ALPHA:g}) disagree, the note says both. Rank-biserial correlation as effect size.",
        ),
    ] + _per_run(
        runs,
        t.comparisons,
        header,
        lambda r: [
            r.metric,
            method_label(r.method_a),
            method_label(r.method_b),
            str(r.n),
            _num(r.mean_difference),
            _ci(r.ci_low, r.ci_high, getattr(r, "ci_note", None)),
            _num(r.wilcoxon_statistic),
            _num(r.p_value),
            _num(r.p_holm),
            _family(r.reference, r.family_size),
            _num(r.rank_biserial),
            r.test_note if isinstance(r.test_note, str) else "",
        ],
    )


def _family(reference: str, size) -> str:
    """``vs contribution, Holm over 9 tests`` / ``all pairs, Holm over 45 tests``."""
    who = "all pairs" if reference == "all" else f"vs {method_label(reference)}"
    return who if pd.isna(size) else f"{who}, Holm over {int(size)} test{'' if int(size) == 1 else 's'}"


def _curves(runs: Sequence[Run], t: ReportTables) -> list[tuple]:
    b = []
    for r in runs:
        part = t.deletion_curves[t.deletion_curves["run"] == r.label]
        wide = part.pivot(index="method", columns="k", values="deletion").loc[in_registry_order(part["method"])]
        b += [
            ("details", r.label, len(runs) == 1),
            (
                "table",
                ["method", *[f"k = {k}" for k in wide.columns]],
                [[method_label(m), *map(_num, wide.loc[m])] for m in wide.index],
            ),
            ("end_details",),
        ]
    return b


def _agreement(runs: Sequence[Run], t: ReportTables, figure) -> list[tuple]:
    b = []
    for r in runs:
        long = t.agreement[t.agreement["run"] == r.label]
        order = in_registry_order(long["method_a"])
        m = long.pivot(index="method_a", columns="method_b", values="mean_spearman").loc[order, order]
        b += [
            ("details", r.label, len(runs) == 1),
            ("table", ["method", *map(method_label, order)], [[method_label(a), *map(_num, m.loc[a])] for a in order]),
            figure(f"agreement_{_slug(r.label)}", f"Method agreement, {r.label}."),
            ("end_details",),
        ]
    return b


def _blocks(
    runs: Sequence[Run],
    t: ReportTables | None,
    files: Mapping[str, str],
    *,
    title: str | None,
    captions: Mapping[str, str] | None = None,
    sanity: tuple[pd.DataFrame, pd.DataFrame] | None = None,
    mixers: tuple[list, pd.DataFrame] | None = None,
    provenance: pd.DataFrame | None = None,
) -> list[tuple]:
    """Every block of the report; ``t`` None for a report without faithfulness folders; ``mixers`` the
    ``laya-eval mixers`` folders and their verdicts; ``provenance`` the code of every folder
    (:func:`~laya_eval.reporting.provenance_sections.provenance_table`), the last section."""
    from laya_eval.version import __version__
    from laya_eval.reporting.mixer_sections import MIXERS_TITLE, mixer_blocks
    from laya_eval.reporting.provenance_sections import provenance_blocks
    from laya_eval.reporting.trust_sections import sanity_blocks

    def figure(name: str, caption: str) -> tuple:
        return ("figure", name, (captions or {}).get(name) or caption, files[name])

    head = _faithfulness_blocks(runs, t, figure) if runs else []
    checks = sanity_blocks(*sanity, SECTIONS["sanity"], figure) if sanity is not None else []
    # The sanity section follows the summaries (the significance matrix is the last of them).
    cut = next((k for k, b in enumerate(head) if b[0] == "h2" and b[1] == SECTIONS["scores"]), len(head))
    body = head[:cut] + checks + head[cut:] + (mixer_blocks(*mixers, figure) if mixers is not None else [])
    body += provenance_blocks(provenance) if provenance is not None else []
    toc = [b[1] for b in body if b[0] == "h2"]
    n_sanity = 0 if sanity is None else sanity[1].shape[0]
    n_mixers = 0 if mixers is None else len(mixers[0])
    sources = (
        f"{len(runs)} result folder(s)"
        + (f" and {n_sanity} sanity folder(s)" if n_sanity else "")
        + (f" and {n_mixers} mixers folder(s)" if n_mixers else "")
    )
    default = (
        "Layer-attribution faithfulness report"
        if runs
        else "Layer-attribution sanity report"
        if n_sanity
        else f"{MIXERS_TITLE} report"
    )
    effect, change, _ = _effect_words(runs) if runs else ("", "", "")
    intro = _INTRO.format(effect=effect, change=change) if runs else _SANITY_INTRO if n_sanity else ""
    return [
        ("h1", title or default),
        ("p", f"Generated by laya-eval {__version__} from {sources}. " + intro),
        ("toc", toc),
        *body,
    ]


_SANITY_INTRO = (
    "Do a method's layer attributions depend on the model at all? Each check destroys what the "
    "attributions should explain and measures how much they change."
)


def _model_cell(accuracy: float, chance: float, verdict: str) -> str:
    """``accuracy 0.930 (chance 0.150), ok``; a folder written before the verdict says so."""
    if accuracy != accuracy:
        return verdict
    return f"accuracy {accuracy:.3f} (chance {chance:.3f}), {verdict}"


def _verdict_notes(runs: Sequence[Run], table: pd.DataFrame) -> list[tuple]:
    """One paragraph per run whose verdict is not ok: the rules that hold and the run's warnings about them."""
    blocks = []
    for r, verdict in zip(runs, table["verdict"]):
        if verdict in ("ok", "not recorded"):
            continue
        notes = [w for w in r.manifest.get("warnings") or [] if w.startswith(("the model ", "the effects are negl"))]
        blocks.append(("p", f"Verdict of {r.label}: {verdict}. " + " ".join(n[0].upper() + n[1:] for n in notes)))
    return blocks


def _faithfulness_blocks(runs: Sequence[Run], t: ReportTables, figure) -> list[tuple]:
    from laya_eval.reporting.trust_sections import significance_blocks

    described = {}
    for r in runs:
        described.update((r.manifest.get("methods") or {}))
    methods = in_registry_order(t.faithfulness["method"])
    body: list[tuple] = [
        ("h2", SECTIONS["runs"]),
        (
            "table",
            ["run", "head", "dataset", "split", "n", "ablation", "scope", "eval seed", "checkpoint sha256", "model"],
            [
                [
                    r.run,
                    r.head,
                    r.dataset,
                    str(r.split),
                    str(r.n),
                    r.ablation,
                    r.scope,
                    str(r.seed),
                    str(r.sha256)[:12] if isinstance(r.sha256, str) and r.sha256 else "—",
                    _model_cell(r.accuracy, r.chance, r.verdict),
                ]
                for r in t.runs.itertuples(index=False)
            ],
        ),
        *_verdict_notes(runs, t.runs),
        ("h2", SECTIONS["methods"]),
        ("table", ["method", "name", "description"], [[method_label(m), m, described.get(m, "")] for m in methods]),
        *_summary(t, figure, runs),
        *significance_blocks(t.significance, SECTIONS["significance"], figure, len(runs)),
        ("h2", SECTIONS["scores"]),
        ("p", "Every score of each run with its 95% bootstrap interval, top-1 hit rate and AOPC."),
    ]
    body += _per_run(
        runs,
        t.faithfulness,
        ["method", "faithfulness", "95% CI", "Deletion@1", "95% CI", "top-1 hit rate", "AOPC", "n", "undefined"],
        lambda r: [
            method_label(r.method),
            _num(r.faithfulness),
            _ci(r.faithfulness_ci_low, r.faithfulness_ci_high, r.faithfulness_ci_note),
            _num(r.deletion_at_1),
            _ci(r.deletion_at_1_ci_low, r.deletion_at_1_ci_high, r.deletion_at_1_ci_note),
            _num(r.top1_hit_rate),
            _num(r.aopc),
            str(r.n),
            str(r.n_undefined),
        ],
    )
    body += _tests(runs, t)
    body += [
        ("h2", SECTIONS["curves"]),
        ("p", f"Mean effect after removing the k layers each method ranks highest ({_effect_words(runs)[0]})."),
        figure("deletion_curves", "Deletion@k per method and run."),
        *_curves(runs, t),
    ]
    body += [
        ("h2", SECTIONS["spearman"]),
        ("p", f"How many samples reach ρ = 1 (within {RHO_ONE_TOL:g}), fall in each band, or are undefined."),
        figure("spearman_distribution", "Shares of samples per band of per-sample Spearman ρ."),
    ]
    body += _per_run(
        runs,
        t.spearman_distribution,
        ["method", "n", *[label for _, label, _ in RHO_BANDS], "share ρ = 1", "median ρ"],
        lambda r: [
            method_label(r.method),
            str(r.n),
            *[str(getattr(r, col)) for col, _, _ in RHO_BANDS],
            _num(r.share_rho_one),
            _num(r.median_rho),
        ],
    )
    body += [
        ("h2", SECTIONS["scatter"]),
        ("p", "Each dot is one (sample, layer): the method's score against the effect of removing that layer."),
    ]
    for r in runs:
        body += [
            ("details", r.label, len(runs) == 1),
            figure(f"scatter_{_slug(r.label)}", f"Attribution vs effect, {r.label}."),
            ("end_details",),
        ]
    body += [
        ("h2", SECTIONS["agreement"]),
        ("p", "Mean over samples of the Spearman ρ between two methods' layer scores (undefined samples excluded)."),
        *_agreement(runs, t, figure),
    ]
    body += operator_blocks(find_operator_tables(runs), figure)
    return body
