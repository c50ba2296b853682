"""The standard error detector as a yardstick for the attention-shift diagnosis.

ROC AUC (incorrect = positive, stratified bootstrap, the same function and seed as ``profile``'s diagnosis)
of ``1 - confidence`` (the predicted class's probability, from a ``faithfulness`` run's samples.csv on the
same checkpoint and split), next to the diagnosis AUC of a ``profile`` run. The two runs must describe the
same samples with the same labels and predictions.

    python benchmarks/diagnosis_confidence.py FAITHFULNESS_DIR PROFILE_DIR
"""

from __future__ import annotations

import sys

import pandas as pd

from laya_eval.profiling.diagnosis import bootstrap_auc
from laya_eval.output.files import verify_result_folder


def main(faith_dir: str, profile_dir: str) -> str:
    manifest = verify_result_folder(faith_dir)
    samples = pd.read_csv(f"{faith_dir}/samples.csv").drop_duplicates("sample").sort_values("sample")
    diag = pd.read_csv(f"{profile_dir}/diagnosis.csv").sort_values("sample")
    if not (samples[["sample", "label", "pred"]].to_numpy() == diag[["sample", "label", "pred"]].to_numpy()).all():
        raise SystemExit("the two runs disagree on samples, labels or predictions")
    incorrect = (diag["correct"] == False).to_numpy()  # noqa: E712 (a column of bools read from CSV)
    rows = []
    for name, score in (
        ("1 - confidence", 1 - samples["confidence"].to_numpy()),
        ("attention-shift distance", diag["distance"].to_numpy()),
    ):
        auc, low, high = bootstrap_auc(score, incorrect, n_resamples=1000, seed=[0, 0])
        rows.append(f"| {name} | {auc:.3f} [{low:.3f}, {high:.3f}] |")
    return "\n".join(
        [
            f"checkpoint sha256 {manifest['checkpoint']['sha256']}, n = {len(diag)}, {int(incorrect.sum())} incorrect",
            "",
            "| error score | ROC AUC [95% CI] |",
            "|---|---|",
            *rows,
        ]
    )


if __name__ == "__main__":
    print(main(*sys.argv[1:3]))
