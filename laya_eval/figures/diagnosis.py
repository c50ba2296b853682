"""Figure of the error diagnosis from attention shift (``laya-eval profile``)."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from laya_eval.figures.style import _finish, _new_figure, _theme, check_style, describe, method_color, method_label

__all__ = ["diagnosis_figure"]


def _auc_text(row) -> str:
    if np.isnan(row["auc"]):
        return "ROC AUC undefined (needs correct and incorrect predictions)"
    interval = "" if np.isnan(row["ci_low"]) else f" [{row['ci_low']:.3f}, {row['ci_high']:.3f}]"
    return f"ROC AUC {row['auc']:.3f}{interval}"


def diagnosis_figure(diagnosis, *, meta: Mapping[str, Any], style: str = "default", width: str | float | None = None):
    """ECDFs of the distance for correct and incorrect predictions, and the ROC curve of the distance as error score.

    Parameters
    ----------
    diagnosis : Diagnosis
        :class:`laya_eval.profiling.diagnosis.Diagnosis` (its ``samples``, ``summary`` and ``meta``).
    meta : mapping
        :func:`describe`'s keys plus ``method``.
    style : {"default", "paper"}
    width : {"single", "double"} or float, optional
    """
    import seaborn as sns
    from sklearn.metrics import roc_curve

    from laya_eval.catalog import DISTANCE_SPECS

    check_style(style)
    samples = diagnosis.samples.dropna(subset=["distance"])
    ok = samples["correct"].to_numpy(dtype=bool)
    labels = np.where(ok, f"correct (n = {int(ok.sum())})", f"incorrect (n = {int((~ok).sum())})")
    data = {"distance": samples["distance"].to_numpy(), "predictions": labels}
    hues = sorted(set(labels))  # "correct ..." before "incorrect ..."
    palette = {h: "#d62728" if h.startswith("incorrect") else method_color(meta["method"]) for h in hues}
    dist_label = DISTANCE_SPECS[diagnosis.meta["distance"]].label
    row = diagnosis.overall
    with _theme(figure_style=style):
        fig = _new_figure(9.0, 3.8, style=style, paper_width=width, natural="double", paper_height=2.2)
        ax_ecdf, ax_roc = fig.subplots(1, 2)
        if hues:
            sns.ecdfplot(data, x="distance", hue="predictions", hue_order=hues, palette=palette, ax=ax_ecdf)
        else:  # seaborn cannot draw an empty hue level
            ax_ecdf.text(
                0.5, 0.5, "no input has a reference profile", ha="center", va="center", transform=ax_ecdf.transAxes
            )
        ax_ecdf.set_xlabel(f"{dist_label} to the reference")
        ax_ecdf.set_ylabel("share of predictions")
        if len(hues) == 2:
            fpr, tpr, _ = roc_curve(~ok, samples["distance"].to_numpy())
            ax_roc.plot(fpr, tpr, color=method_color(meta["method"]), drawstyle="steps-post")
        ax_roc.plot([0, 1], [0, 1], color="#999999", linestyle="--", linewidth=0.8)
        ax_roc.set(
            xlim=(0, 1),
            ylim=(0, 1),
            xlabel="false positive rate (correct flagged)",
            ylabel="true positive rate (errors flagged)",
            title=_auc_text(row),
        )
        ax_roc.set_aspect("equal")
        who = "predicted" if diagnosis.meta["reference_by"] == "pred" else "true"
        note = (
            f"{dist_label} to the {who} class's correct-prediction profile (the mean "
            f"{method_label(meta['method'])} of its correct predictions, leaving the input out); ROC: the distance "
            "as a score of errors"
        )
        return _finish(fig, f"Error signal from {method_label(meta['method'])}", describe(meta), note)
