"""Report blocks that say how far the answer can be trusted: across seeds, significance, sanity checks.

Each function returns blocks (see :mod:`laya_eval.reporting.render`) formatted from the tables as written to
CSV, and no block at all when its table is empty.
"""

from __future__ import annotations

from typing import Callable

import pandas as pd

from laya_eval.figures import method_label
from laya_eval.reporting.render import _ci, _num, _slug
from laya_eval.catalog import in_registry_order
from laya_eval.reporting.sanity_verdicts import ROAR_MIN_DROP, SIMILARITY_MAX
from laya_eval.reporting.seeds import SEED_METRICS
from laya_eval.reporting.significance import ALPHA, holm_family_text, matrix_cells
from laya_eval.stats import min_wilcoxon_p

__all__ = ["SEEDS_TEST", "sanity_blocks", "seed_blocks", "significance_blocks"]

SEEDS_TEST = (
    "two-sided Wilcoxon signed-rank test over runs, paired by run (scipy.stats.wilcoxon, "
    "zero_method='zsplit'; with up to 13 runs its p-value is exact: the exact null, or all 2^n sign "
    "flips when values tie)"
)


def _min_p_note(n: int) -> str:
    floor = min_wilcoxon_p(n)
    if floor < ALPHA:
        return f"With n = {n} runs the smallest p-value the exact test can give is {floor:.4f}."
    return (
        f"With n = {n} runs the smallest two-sided p-value the exact test can give is 2/2^{n} = {floor:.4f}: "
        f"no difference can reach p < {ALPHA:g}, whatever the data (at least 6 runs are needed)."
    )


def seed_blocks(across: pd.DataFrame, ranks: pd.DataFrame) -> list[tuple]:
    """Per seed group and metric: mean ± std over runs, mean rank, test against the best, rank per run."""
    blocks: list[tuple] = []
    for group in pd.unique(across["group"]) if len(across) else []:
        own = across[across["group"] == group]
        runs = list(dict.fromkeys(ranks.loc[ranks["group"] == group, "run"]))
        n = len(runs)
        blocks += [
            ("h3", f"Across seeds: {group} ({n} runs)"),
            (
                "p",
                f"Runs: {', '.join(runs)}. Each method against the best one (highest mean): {SEEDS_TEST}, "
                f"Holm-adjusted over the methods. {_min_p_note(n)} Rank 1 = highest in that run (ties "
                "share the average rank).",
            ),
        ]
        for metric, title in SEED_METRICS.items():
            part = own[own["metric"] == metric]
            rank = ranks[(ranks["group"] == group) & (ranks["metric"] == metric)]
            by_run = rank.set_index(["method", "run"])["rank"]
            header = [
                "method",
                f"{title}: mean ± std",
                "mean rank",
                "reference",
                "mean(m − ref.)",
                "Wilcoxon W",
                "p",
                "p (Holm)",
                *[f"rank in {r}" for r in runs],
            ]
            rows = [
                [
                    method_label(r.method),
                    f"{_num(r.mean)} ± {_num(r.std)}",
                    _num(r.mean_rank),
                    method_label(r.reference),
                    _num(r.mean_difference),
                    _num(r.wilcoxon_statistic),
                    _num(r.p_value),
                    _num(r.p_holm),
                    *[_num(by_run.get((r.method, run))) for run in runs],
                ]
                for r in part.itertuples(index=False)
            ]
            blocks.append(("table", header, rows))
    return blocks


def _matrix_block(long: pd.DataFrame) -> tuple:
    methods = in_registry_order(long["method"])
    cells = matrix_cells(long, methods)
    return (
        "table",
        ["row vs column", *map(method_label, methods)],
        [[method_label(m), *row] for m, row in zip(methods, cells)],
    )


def significance_blocks(
    significance: pd.DataFrame, heading: str, figure: Callable[[str, str], tuple], n_runs: int
) -> list[tuple]:
    """The significance matrices: per run (collapsed when several) and per seed group."""
    if significance.empty:
        return []
    seeds = (
        f"; across seeds: the {SEEDS_TEST}, Holm over all pairs of the group, per metric"
        if (significance["source"] == "seeds").any()
        else ""
    )
    blocks: list[tuple] = [
        ("h2", heading),
        (
            "p",
            f"Cell (row, column): ▲ the row method scores higher than the column method (mean of row − column > 0) "
            f"with Holm-adjusted p < {ALPHA:g}; ▼ it scores lower; · not significant at {ALPHA:g}; the number is "
            "the Holm-adjusted p (<0.001 below 0.001); ? no test; empty: the pair is not in the run's family. "
            "Higher is better for both metrics. Per run: the Wilcoxon signed-rank test over samples of "
            "comparisons.csv, Holm over one metric's tests (by default every method against the run's reference "
            f"method, --reference; the number of tests is given with each matrix){seeds}. The same decision marks "
            "the figures and fills comparisons.csv's significant column. Details: significance.csv and the paired "
            "tests below.",
        ),
        figure(
            "significance",
            "Significance matrix of faithfulness" + (" (per run and across seeds)." if seeds else " per run."),
        ),
    ]
    for source, name in significance[["source", "name"]].drop_duplicates().itertuples(index=False):
        own = significance[(significance["source"] == source) & (significance["name"] == name)]
        summary = name if source == "run" else f"across seeds: {name}"
        blocks.append(("details", summary, n_runs == 1 or source == "seeds"))
        for metric, title in SEED_METRICS.items():
            part = own[own["metric"] == metric]
            if not part.empty:
                blocks += [("p", f"{title} ({holm_family_text(part)}):"), _matrix_block(part)]
        blocks.append(("end_details",))
    return blocks


def _similarity_cell(value, low, high, note=None) -> str:
    return "undefined" if pd.isna(value) else f"{_num(value)} {_ci(low, high, note)}"


def sanity_blocks(
    table: pd.DataFrame, runs_table: pd.DataFrame, heading: str, figure: Callable[[str, str], tuple]
) -> list[tuple]:
    """The "Sanity checks" section: rules, one row per sanity run, per run the verdict table and figure."""
    if table.empty:
        return []
    blocks: list[tuple] = [
        ("h2", heading),
        (
            "p",
            "From laya-eval sanity folders. Cascading randomisation re-initialises the head's parameter groups "
            "top-down (the last step: all of them); data randomisation retrains the head on shuffled labels. "
            "Similarity: Spearman ρ between the original and the new attributions (as sanity.json's "
            "'similarity' says), 95% bootstrap interval. Rule: a randomisation check passes when the "
            f"interval's upper bound is below {SIMILARITY_MAX:g} (the attributions changed when what they "
            "explain was destroyed), n/a when the similarity is undefined (attributions constant across "
            "samples); a method passes when every defined check passes. Layer-ROAR: Spearman ρ between the "
            "method's mean attribution per layer and the test-accuracy drop of a head retrained without that "
            f"layer; agrees when the interval's lower bound is above 0, uninformative when no layer's mean drop "
            f"reaches {ROAR_MIN_DROP:g}. Random is the chance reference (redrawn at every step).",
        ),
        (
            "table",
            [
                "sanity run",
                "head",
                "dataset",
                "n",
                "similarity",
                "ROAR seeds",
                "accuracy",
                "shuffled-label acc.",
                "largest ROAR drop",
                "wall time (s)",
            ],
            [
                [
                    r.sanity_run,
                    str(r.head),
                    str(r.dataset),
                    str(r.n),
                    str(r.similarity),
                    str(r.roar_seeds),
                    _num(r.original_accuracy),
                    _num(r.shuffled_label_accuracy),
                    _num(r.max_roar_drop),
                    str(r.wall_time_s),
                ]
                for r in runs_table.itertuples(index=False)
            ],
        ),
    ]
    labels = list(dict.fromkeys(table["sanity_run"]))
    for label in labels:
        part = table[table["sanity_run"] == label]
        params = next((p for p in part["cascading_params"] if isinstance(p, str)), "?")
        blocks += [
            ("details", f"sanity: {label}", len(labels) == 1),
            (
                "table",
                ["method", f"cascading ({params})", "check", "shuffled labels", "check", "ROAR ρ", "ROAR", "verdict"],
                [
                    [
                        method_label(r.method),
                        _similarity_cell(
                            r.cascading_similarity, r.cascading_ci_low, r.cascading_ci_high, r.cascading_ci_note
                        ),
                        r.cascading_verdict,
                        _similarity_cell(r.data_similarity, r.data_ci_low, r.data_ci_high, r.data_ci_note),
                        r.data_verdict,
                        _similarity_cell(r.roar_spearman, r.roar_ci_low, r.roar_ci_high, r.roar_ci_note),
                        r.roar_verdict,
                        r.verdict,
                    ]
                    for r in part.itertuples(index=False)
                ],
            ),
            figure(
                f"sanity_{_slug(label)}", f"Similarity to the original attributions per randomisation step, {label}."
            ),
            ("end_details",),
        ]
    return blocks
