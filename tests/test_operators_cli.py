"""operators.csv, its report section and the random ablations through the command line."""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.stats import friedmanchisquare

from tests.cli_helpers import run


def test_several_ablations_write_operators_csv_and_its_report(digits_checkpoints, tmp_path):
    out = tmp_path / "ops"
    result = run(
        "faithfulness",
        digits_checkpoints["laya"],
        "--ablation",
        "gate,zero,resample,noise",
        "--draws",
        2,
        "--limit",
        30,
        "--bootstrap",
        0,
        "--methods",
        "laya,contribution,block_influence,alpha_norm,random",
        "--out",
        out,
        "-q",
    )
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == ["gate", "noise", "operators.csv", "resample", "zero"]
    assert (out / "resample" / "donors.csv").is_file() and not (out / "noise" / "donors.csv").exists()
    donors = pd.read_csv(out / "resample" / "donors.csv")
    assert len(donors) == 30 * 2 and (donors["donor"] != donors["sample"]).all()
    table = pd.read_csv(out / "operators.csv").set_index("method")
    operators = ["gate", "zero", "resample", "noise"]
    faith = pd.DataFrame(
        {a: pd.read_csv(out / a / "summary.csv").set_index("method")["faithfulness"] for a in operators}
    )
    for a in operators:
        np.testing.assert_allclose(table[f"faithfulness_{a}"], faith.loc[table.index, a], rtol=1e-7)
        # rank 1 = most faithful, average ranks on ties
        np.testing.assert_allclose(table[f"rank_{a}"], faith.loc[table.index, a].rank(ascending=False))
    np.testing.assert_allclose(
        table["largest_swing"], faith.max(axis=1).loc[table.index] - faith.min(axis=1).loc[table.index], atol=1e-7
    )
    chi2 = friedmanchisquare(*faith.to_numpy()).statistic  # blocks = operators, treatments = methods
    np.testing.assert_allclose(table["kendall_w"], chi2 / (4 * (len(faith) - 1)), rtol=1e-6)
    assert "Kendall's W of the method ranking across gate, zero, resample, noise" in result.output
    best = {a: faith.drop(index="random")[a].idxmax() for a in operators}
    assert ("warning: the best method changes with the operator" in result.output) == (len(set(best.values())) > 1)

    report = run("report", *[out / a for a in operators], "--out", tmp_path / "report", "--no-html")
    assert report.exit_code == 0, report.output
    text = (tmp_path / "report" / "report.md").read_text()
    assert "## Operator sensitivity" in text and "figures/operators_ops.png" in text
    assert (tmp_path / "report" / "figures" / "operators_ops.png").is_file()
    # an operators.csv from another run is refused, not reported
    (out / "operators.csv").write_text((out / "operators.csv").read_text().replace("laya", "lay", 1))
    mixed = run("report", *[out / a for a in operators], "--out", tmp_path / "report2", "--no-html")
    assert mixed.exit_code == 2 and "operators.csv" in mixed.output and "mixed" in mixed.output
    sentence = (
        "The best method changes with the operator"
        if len(set(best.values())) > 1
        else "The best method is the same under every operator"
    )
    assert sentence in text


def test_prune_and_sanity_refuse_per_sample_ablations(digits_checkpoints, tmp_path):
    for command in ("prune", "sanity"):
        result = run(command, digits_checkpoints["laya"], "--ablation", "resample", "--out", tmp_path / command)
        assert result.exit_code == 2 and "resample" in result.output
        assert not (tmp_path / command).exists()
