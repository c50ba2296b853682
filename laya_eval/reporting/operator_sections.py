"""The report's operator-sensitivity section, from the ``operators.csv`` of runs over several ablations.

``laya-eval faithfulness --ablation A,B,...`` writes one subfolder per ablation and ``operators.csv`` beside
them. A report given those subfolders finds the table in their parent folder (once per parent) and shows it
with its figure and one sentence: whether the most faithful method changes with the operator.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import pandas as pd

from laya_eval.catalog import METHOD_SPECS
from laya_eval.errors import ResultsError
from laya_eval.output.files import sha256_bytes
from laya_eval.figures import method_label
from laya_eval.reporting.render import _num, _slug
from laya_eval.reporting.runs import Run

__all__ = [
    "OPERATORS_TITLE",
    "OperatorTable",
    "best_by_operator",
    "find_operator_tables",
    "operator_blocks",
    "operator_sentence",
]

OPERATORS_TITLE = "Operator sensitivity"


@dataclass(frozen=True)
class OperatorTable:
    """One run's ``operators.csv``: ``label`` names its folder; ``operators`` in the run's order."""

    label: str
    table: pd.DataFrame
    operators: list[str]


def find_operator_tables(runs: Sequence[Run]) -> list[OperatorTable]:
    """The ``operators.csv`` beside the runs' folders, once per parent folder, in the runs' order."""
    out, seen = [], set()
    for r in runs:
        if r.folder is None:
            continue
        parent = Path(r.folder).parent
        path = parent / "operators.csv"
        if parent in seen or not path.is_file():
            continue
        seen.add(parent)
        data = path.read_bytes()
        recorded = (r.manifest.get("run_files") or {}).get("../operators.csv")
        if recorded != sha256_bytes(data):
            raise ResultsError(
                f"'{path}' is not the operators.csv the run of '{r.folder}' wrote (files of different "
                "runs are mixed); rerun the evaluation."
            )
        table = pd.read_csv(io.BytesIO(data), keep_default_na=False, na_values=[""])
        operators = [c[len("faithfulness_") :] for c in table.columns if c.startswith("faithfulness_")]
        out.append(OperatorTable(parent.name or str(parent), table, operators))
    return out


def best_by_operator(t: OperatorTable) -> dict[str, str | None]:
    """Per operator, the non-baseline method of highest faithfulness (None where none is defined)."""
    real = t.table[[not (METHOD_SPECS.get(m) and METHOD_SPECS[m].baseline) for m in t.table["method"]]]
    best = {}
    for a in t.operators:
        column = real.set_index("method")[f"faithfulness_{a}"].dropna()
        best[a] = None if column.empty else str(column.idxmax())
    return best


def operator_sentence(t: OperatorTable) -> str:
    """Whether the most faithful method changes with the operator, and the agreement of the rankings."""
    best = best_by_operator(t)
    named = {a: (method_label(b) if b else "undefined") for a, b in best.items()}
    w, p = t.table["kendall_w"].iloc[0], t.table["kendall_w_p_value"].iloc[0]
    agreement = (
        f"Kendall's W of the method ranking across the {len(t.operators)} operators is {_num(w)} "
        f"(permutation p = {_num(p)})"
        if pd.notna(w)
        else "Kendall's W is undefined"
    )
    if len({b for b in best.values() if b}) > 1:
        head = "The best method changes with the operator: " + ", ".join(f"{a}: {b}" for a, b in named.items())
    else:
        head = f"The best method is the same under every operator ({next(iter(named.values()))})"
    swing = t.table.dropna(subset=["largest_swing"])
    if not swing.empty:
        top = swing.loc[swing["largest_swing"].idxmax()]
        head += (
            f"; the largest swing is {method_label(top['method'])}'s, {_num(top['largest_swing'])} of "
            f"faithfulness between {top['swing_from']} and {top['swing_to']}"
        )
    return f"{head}. {agreement}."


def _cell(row: pd.Series, operator: str) -> str:
    rank = row[f"rank_{operator}"]
    return f"{_num(row[f'faithfulness_{operator}'])} ({'n/a' if pd.isna(rank) else f'{float(rank):g}'})"


def operator_blocks(tables: Sequence[OperatorTable], figure) -> list[tuple]:
    """The section's blocks (none when no run has an ``operators.csv``)."""
    if not tables:
        return []
    body: list[tuple] = [
        ("h2", OPERATORS_TITLE),
        (
            "p",
            "The same methods scored against several removal operators (--ablation): each "
            "method's faithfulness and rank (1 = most faithful) under each, the largest swing "
            "between two operators, and the agreement of the rankings (Kendall's W: 1 = every "
            "operator ranks the methods alike, 0 = no agreement).",
        ),
    ]
    for t in tables:
        header = ["method", *[f"{a} (rank)" for a in t.operators], "largest swing"]
        rows = [
            [method_label(r["method"]), *[_cell(r, a) for a in t.operators], _num(r["largest_swing"])]
            for _, r in t.table.iterrows()
        ]
        body += [
            ("details", t.label, len(tables) == 1),
            ("p", operator_sentence(t)),
            ("table", header, rows),
            figure(f"operators_{_slug(t.label)}", f"Faithfulness per operator, {t.label}."),
            ("end_details",),
        ]
    return body
