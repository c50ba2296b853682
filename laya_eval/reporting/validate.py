"""What ``report`` reads is checked before anything is computed from it: columns, dtypes, layer names.

A result folder is data that may have been edited (and its manifest re-hashed to match). Each check names
the file and the column, and says what was expected and what arrived, as one :class:`ResultsError` line:

- ``summary``: one row per method; ``n`` and ``n_undefined`` whole non-negative numbers; every metric and
  interval column numbers or empty; the text columns text.
- ``samples``: ``sample``, ``label`` and ``pred`` whole numbers; ``spearman`` (and ``deletion_at_1``) numbers
  or empty; one row per (sample, method); only methods of the summary.
- ``layers``: ``sample`` and ``layer`` whole numbers, ``layer`` from 1 to L; ``attribution`` and ``effect``
  numbers; every (sample, method) with the same L layers; only methods of the summary.
- ``comparisons``: numbers where numbers belong.
- the manifest's ``layer_names``: a list of L strings.
- ranges: a number must lie in the range its definition gives it (a rank correlation, its interval and a
  rank-biserial in [-1, 1]; a hit rate, a p-value and an accuracy in [0, 1]; Deletion@k, AOPC and their intervals
  within the bounds the manifest's ``metrics`` record declares). A folder edited to hold ``1e308`` (its manifest
  re-hashed to match) is refused, naming the file, the column and the row, before a figure or a table is made
  from it.

A ``laya-eval sanity`` folder is checked the same way (:func:`check_sanity_tables`): ``check``, ``params`` and
``method`` text; ``step``, ``layer`` and ``seed`` whole numbers; similarities, intervals, faithfulness, accuracies
and the ROAR correlation numbers or empty (accuracies and drops finite); the notes text or empty; one row per
(check, step, method) and per method of ``roar_agreement``; similarities, faithfulness and the ROAR correlation
in [-1, 1], accuracies in [0, 1], accuracy drops in [-1, 1]. A ``laya-eval mixers`` folder's ``summary`` and
``map`` tables are checked by :func:`check_mixer_ranges` (faithfulness and its interval in [-1, 1]; the mean
effect, a difference of probabilities, in [-1, 1]; its mean absolute value in [0, 1]).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from laya_eval.errors import ResultsError

__all__ = ["check_mixer_ranges", "check_ranges", "check_run_tables", "check_sanity_tables", "manifest_warning"]

_TEXT = {
    "summary": ("head", "dataset", "method", "ablation", "scope"),
    "samples": ("method",),
    "layers": ("method",),
    "comparisons": ("metric", "method_a", "method_b"),
}
_INTEGERS = {
    "summary": ("n", "n_undefined"),
    "samples": ("sample", "label", "pred", "document", "offset", "tokens"),
    "layers": ("sample", "layer"),
    "comparisons": ("n",),
}
_NUMBERS = {
    "summary": (
        "faithfulness",
        "faithfulness_ci_low",
        "faithfulness_ci_high",
        "deletion_at_1",
        "deletion_at_1_ci_low",
        "deletion_at_1_ci_high",
        "top1_hit_rate",
        "recall_at_1",
        "recall_at_3",
        "aopc",
        "faithfulness_p_value",
    ),
    "samples": ("spearman", "deletion_at_1", "confidence"),
    "layers": ("attribution", "effect"),
    "comparisons": (
        "mean_difference",
        "ci_low",
        "ci_high",
        "wilcoxon_statistic",
        "p_value",
        "p_holm",
        "rank_biserial",
        "family_size",
    ),
}


_RHO, _SHARE = (-1.0, 1.0), (0.0, 1.0)
#: The range each number of a faithfulness folder lies in by its definition (metric bounds from the manifest too).
_RANGES = {
    "summary": {
        "faithfulness": _RHO,
        "faithfulness_ci_low": _RHO,
        "faithfulness_ci_high": _RHO,
        "top1_hit_rate": _SHARE,
        "faithfulness_p_value": _SHARE,
    },
    "samples": {"spearman": _RHO},
    "layers": {},
    "comparisons": {"p_value": _SHARE, "p_holm": _SHARE, "rank_biserial": _RHO},
}
_SANITY_RANGES = {
    "similarity": _RHO,
    "similarity_ci_low": _RHO,
    "similarity_ci_high": _RHO,
    "faithfulness": _RHO,
    "accuracy": _SHARE,
    "accuracy_drop": _RHO,
    "spearman": _RHO,
    "ci_low": _RHO,
    "ci_high": _RHO,
}
_MIXER_RANGES = {
    "faithfulness": _RHO,
    "faithfulness_ci_low": _RHO,
    "faithfulness_ci_high": _RHO,
    "mean_effect": _RHO,
    "mean_abs_effect": _SHARE,
}
#: Rounding a number may carry past its bound (a mean of values at the bound).
_RANGE_TOL = 1e-9


def check_ranges(table: pd.DataFrame, ranges: dict[str, tuple[float, float]], where: str) -> None:
    """Refuse a number outside the range of its column (``ranges``: column -> (low, high)); empty cells pass."""
    for column, (low, high) in ranges.items():
        if column not in table:
            continue
        values = pd.to_numeric(table[column], errors="coerce").to_numpy(dtype=np.float64)
        with np.errstate(invalid="ignore"):
            bad = (values < low - _RANGE_TOL) | (values > high + _RANGE_TOL)
        if bad.any():
            raise ResultsError(
                f"{where}: column '{column}' must lie in [{low:g}, {high:g}]; {_first_bad(table, bad, column)}."
            )


def check_mixer_ranges(table: pd.DataFrame, where: str) -> None:
    """The ranges of a ``laya-eval mixers`` folder's ``summary`` or ``map`` table (see the module docstring)."""
    check_ranges(table, _MIXER_RANGES, where)


def _declared_ranges(manifest: dict[str, Any], columns: Sequence[str]) -> dict[str, tuple[float, float]]:
    """Deletion@k, AOPC and their intervals: the bounds the manifest's ``metrics`` record declares, where it declares
    finite ones (``deletion_at_1`` stands for every k)."""
    metrics = manifest.get("metrics") if isinstance(manifest.get("metrics"), dict) else {}
    out = {}
    for column in columns:
        name = "aopc" if column.startswith("aopc") else "deletion_at_1" if column.startswith("deletion_at_") else None
        record = metrics.get(name) if name else None
        if not isinstance(record, dict):
            continue
        low, high = record.get("lower_bound"), record.get("upper_bound")
        numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (low, high))
        if numbers and np.isfinite([low, high]).all() and low < high:
            out[column] = (float(low), float(high))
    return out


_SANITY_RANDOMISATION = {
    "text": ("check", "params", "method"),
    "integers": ("step",),
    "numbers": ("similarity", "similarity_ci_low", "similarity_ci_high", "faithfulness"),
    "finite": ("accuracy",),
    "notes": ("similarity_ci_note",),
    "unique": ("check", "step", "method"),
}
#: What each table of a sanity folder holds, by file name.
_SANITY = {
    "randomisation.csv": _SANITY_RANDOMISATION,
    "data_randomisation.csv": _SANITY_RANDOMISATION,
    "layer_roar.csv": {"integers": ("layer", "seed"), "finite": ("accuracy", "accuracy_drop")},
    "roar_agreement.csv": {
        "text": ("method",),
        "numbers": ("spearman", "ci_low", "ci_high"),
        "notes": ("ci_note",),
        "unique": ("method",),
    },
}


def _first_bad(table: pd.DataFrame, bad: np.ndarray, column: str) -> str:
    k = int(np.flatnonzero(bad)[0])
    value = table[column].iloc[k]
    return f"row {k + 1} holds {value.item() if isinstance(value, np.generic) else value!r}"


def _numbers(table: pd.DataFrame, column: str, where: str, *, integer: bool, finite: bool = False) -> None:
    values = table[column]
    if values.dtype == bool or (values.dtype == object and values.map(lambda v: isinstance(v, bool)).any()):
        raise ResultsError(f"{where}: column '{column}' must be numbers; it holds true/false values.")
    numeric = pd.to_numeric(values, errors="coerce")
    bad = (numeric.isna() & values.notna()).to_numpy()
    if bad.any():
        raise ResultsError(f"{where}: column '{column}' must be numbers; {_first_bad(table, bad, column)}.")
    array = numeric.to_numpy(dtype=np.float64)
    if integer:
        bad = ~np.isfinite(array) | (array != np.round(array)) | (array < 0)
        if bad.any():
            raise ResultsError(
                f"{where}: column '{column}' must be whole non-negative numbers; {_first_bad(table, bad, column)}."
            )
    elif finite and not np.isfinite(array).all():
        bad = ~np.isfinite(array)
        raise ResultsError(f"{where}: column '{column}' must be finite numbers; {_first_bad(table, bad, column)}.")
    elif np.isinf(array).any():
        bad = np.isinf(array)
        raise ResultsError(f"{where}: column '{column}' must be numbers or empty; {_first_bad(table, bad, column)}.")


def _text(table: pd.DataFrame, column: str, where: str) -> None:
    bad = ~table[column].map(lambda v: isinstance(v, str) and v != "").to_numpy()
    if bad.any():
        raise ResultsError(f"{where}: column '{column}' must be text; {_first_bad(table, bad, column)}.")


def _text_or_empty(table: pd.DataFrame, column: str, where: str) -> None:
    bad = ~table[column].map(lambda v: isinstance(v, str) or (isinstance(v, float) and np.isnan(v))).to_numpy()
    if bad.any():
        raise ResultsError(f"{where}: column '{column}' must be text or empty; {_first_bad(table, bad, column)}.")


def check_sanity_tables(folder: Path, tables: dict[str, pd.DataFrame]) -> dict[str, pd.DataFrame]:
    """Check a sanity folder's tables (``{file name: table}``; see the module docstring); return them with the
    numeric columns as numbers (int64 where whole numbers belong)."""
    out = {}
    for name, table in tables.items():
        rules, where = _SANITY[name], str(folder / name)
        present = {
            kind: [c for c in rules.get(kind, ()) if c in table]
            for kind in ("text", "integers", "numbers", "finite", "notes")
        }
        for column in present["text"]:
            _text(table, column, where)
        for column in present["notes"]:
            _text_or_empty(table, column, where)
        for column in present["integers"]:
            _numbers(table, column, where, integer=True)
        for column in present["numbers"] + present["finite"]:
            _numbers(table, column, where, integer=False, finite=column in present["finite"])
        table = table.copy()
        for column in present["integers"]:
            table[column] = pd.to_numeric(table[column]).astype(np.int64)
        for column in present["numbers"] + present["finite"]:
            table[column] = pd.to_numeric(table[column]).astype(np.float64)
        check_ranges(table, _SANITY_RANGES, where)
        unique = list(rules.get("unique", ()))
        if unique and table.duplicated(unique).any():
            raise ResultsError(
                f"{where}: columns {', '.join(repr(c) for c in unique)} must be unique; a row repeats them."
            )
        out[name] = table
    return out


def _check_columns(name: str, table: pd.DataFrame, where: str) -> None:
    if name == "summary":
        for column in table.columns:
            if re.fullmatch(r"deletion_at_\d+", str(column)):
                _numbers(table, column, where, integer=False)
    for column in _TEXT[name]:
        if column in table:
            _text(table, column, where)
    for column in _INTEGERS[name]:
        if column in table:
            _numbers(table, column, where, integer=True)
    for column in _NUMBERS[name]:
        if column in table:
            _numbers(table, column, where, integer=False, finite=(name == "layers"))


def _as_numbers(table: pd.DataFrame, name: str) -> pd.DataFrame:
    """The checked columns as numbers (int64 where whole numbers belong), the rest as read."""
    table = table.copy()
    for column in _INTEGERS[name]:
        if column in table:
            table[column] = pd.to_numeric(table[column]).astype(np.int64)
    for column in _NUMBERS[name] + (
        tuple(c for c in table.columns if re.fullmatch(r"deletion_at_\d+", str(c))) if name == "summary" else ()
    ):
        if column in table:
            table[column] = pd.to_numeric(table[column]).astype(np.float64)
    return table


def _check_layers(layers: pd.DataFrame, where: str) -> int:
    counts = layers.groupby(["sample", "method"], sort=False)["layer"].agg(["nunique", "size", "min", "max"])
    n_layers = int(counts["max"].max()) if len(counts) else 0
    bad = (counts["nunique"] != n_layers) | (counts["size"] != n_layers) | (counts["min"] != 1)
    if bad.any():
        sample, method = bad[bad].index[0]
        raise ResultsError(
            f"{where}: column 'layer' must hold layers 1..{n_layers} once per (sample, method); "
            f"sample {sample}, method {method!r} does not."
        )
    return n_layers


def _check_methods(table: pd.DataFrame, methods: set[str], where: str) -> None:
    unknown = sorted(set(table["method"]) - methods)
    if unknown:
        raise ResultsError(f"{where}: column 'method' holds {unknown[0]!r}, which summary.csv does not list.")


def check_run_tables(
    folder: Path,
    tables: dict[str, pd.DataFrame],
    comparisons: pd.DataFrame | None,
    manifest: dict[str, Any],
    names: dict[str, str],
) -> tuple[dict[str, pd.DataFrame], pd.DataFrame | None]:
    """Check one folder's tables (see the module docstring); return them with numeric columns as numbers.

    ``names`` maps a table to its file name (``summary`` -> ``summary.csv``) for the messages.
    """
    where = {name: str(folder / file) for name, file in names.items()}
    for name, table in tables.items():
        _check_columns(name, table, where[name])
    summary = tables["summary"]
    if summary["method"].duplicated().any():
        method = summary["method"][summary["method"].duplicated()].iloc[0]
        raise ResultsError(f"{where['summary']}: column 'method' lists {method!r} twice; one row per method.")
    tables = {name: _as_numbers(table, name) for name, table in tables.items()}
    for name, table in tables.items():
        declared = _declared_ranges(manifest, [c for c in table.columns if str(c).startswith(("deletion_at_", "aopc"))])
        check_ranges(table, {**_RANGES[name], **declared}, where[name])
    methods = set(summary["method"])
    for name in ("samples", "layers"):
        _check_methods(tables[name], methods, where[name])
    if tables["samples"].duplicated(["sample", "method"]).any():
        raise ResultsError(
            f"{where['samples']}: columns 'sample', 'method' must be unique; a (sample, method) appears twice."
        )
    n_layers = _check_layers(tables["layers"], where["layers"])
    _check_layer_names(manifest.get("layer_names"), n_layers, folder)
    if comparisons is not None:
        file = str(folder / "comparisons.csv")
        _check_columns("comparisons", comparisons, file)
        comparisons = _as_numbers(comparisons, "comparisons")
        check_ranges(comparisons, _RANGES["comparisons"], file)
        for column in ("method_a", "method_b"):
            unknown = sorted(set(comparisons[column]) - methods)
            if unknown:
                raise ResultsError(f"{file}: column '{column}' holds {unknown[0]!r}, which summary.csv does not list.")
    return tables, comparisons


def _check_layer_names(names: Any, n_layers: int, folder: Path) -> None:
    if names is None:
        return
    where = f"{folder / 'manifest.json'}: 'layer_names'"
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ResultsError(f"{where} must be a list of strings; got {type(names).__name__} {_short(names)}.")
    if n_layers and len(names) != n_layers:
        raise ResultsError(f"{where} must name the {n_layers} layers of layers.csv; got {len(names)} names.")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def manifest_warning(folder: Path, manifest: dict[str, Any] | None, read: Sequence[str]) -> str | None:
    """Why ``folder`` is unverified (no manifest, or one that does not list a file read), else ``None``."""
    if manifest is None:
        return f"'{folder}' has no manifest.json: its files are unverified (they may come from different runs)."
    listed = set((manifest.get("files") or {}) if isinstance(manifest.get("files"), dict) else ())
    unlisted = [f for f in read if f not in listed]
    if unlisted:
        return (
            f"'{folder}/manifest.json' does not list {', '.join(unlisted)}: "
            f"{'that file is' if len(unlisted) == 1 else 'those files are'} unverified."
        )
    return None
