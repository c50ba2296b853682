"""``laya-eval report`` on ``laya-eval mixers`` folders: the "Depth mixers" section, its verdicts, bad files."""

from __future__ import annotations

import hashlib
import json
import shutil

import numpy as np
import pandas as pd
import pytest
import torch

from laya_eval.mixers.reference import PatchDepthClassifier, save_mixer_model
from tests.cli_helpers import assert_one_line_error, run


@pytest.fixture(scope="module")
def mixers_dir(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mixers-report")
    torch.manual_seed(0)
    model = PatchDepthClassifier("attnres", image_size=8, patch=4, dim=8, depth=3, heads=2, n_classes=3)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.5)
    path = save_mixer_model(model, tmp / "m.pt")
    np.savez(tmp / "d.npz", x=torch.randn(300, 1, 8, 8).numpy(), y=np.arange(300) % 3)  # 60 test rows
    out = tmp / "audit"
    result = run(
        "mixers",
        path,
        "--data",
        f"npz:{tmp / 'd.npz'}",
        "--limit",
        55,
        "--bootstrap",
        100,
        "--methods",
        "mass,norm_mass,random",
        "--out",
        out,
        "--quiet",
    )
    assert result.exit_code == 0, result.output
    return out


def test_report_shows_the_map_and_a_verdict_per_mixer(mixers_dir, tmp_path):
    out = tmp_path / "report"
    result = run("report", mixers_dir, "--out", out)
    assert result.exit_code == 0, result.output
    md = (out / "report.md").read_text()
    assert "## Depth mixers" in md
    figure = out / "figures" / "mixers_m-weight.png"
    assert figure.is_file() and figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "figures/mixers_m-weight.png" in md and "data:image/png;base64" in (out / "report.html").read_text()
    summary = pd.read_csv(mixers_dir / "summary.csv")
    mass = summary[summary.method == "mass"].set_index("mixer")
    for mixer, row in mass.iterrows():
        # The rule applied here to summary.csv by hand: interval above 0 -> predicts, below -> against, else not.
        low, high = row.faithfulness_ci_low, row.faithfulness_ci_high
        verdict = (
            "mass predicts effect"
            if low > 0
            else "mass ranks sources against their effects"
            if high < 0
            else "mass does not predict effect"
        )
        line = next(x for x in md.splitlines() if x.startswith(f"{mixer} ("))
        assert verdict in line and f"{row.faithfulness:.4f}" in line and f"{low:.4f}, {high:.4f}" in line, line
        assert mixer in result.output and verdict in result.output
    written = pd.read_csv(out / "mixers.csv")
    assert list(written.mixer) == ["mixers.0", "mixers.1", "mixers.2"]
    np.testing.assert_array_equal(written.faithfulness, mass.faithfulness.to_numpy())
    assert len(set(written.verdict)) > 1  # the example holds more than one verdict
    mapped = pd.read_csv(mixers_dir / "map.csv")
    assert f"| mixers.2 | 4 | 55 | {mapped.mean_mass.iloc[-1]:.4f} | {mapped.mean_effect.iloc[-1]:.4f} |" in md


def _rehash(folder, name):
    """Re-stamp ``name``'s sha256 in the manifest, as someone editing the folder by hand would."""
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["files"][name] = hashlib.sha256((folder / name).read_bytes()).hexdigest()
    (folder / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize(
    "column, value, message",
    [
        ("mean_mass", "lots", r"map\.csv: column 'mean_mass' must be numbers; row 2 holds 'lots'"),
        ("source", "1.5", r"map\.csv: column 'source' must be whole non-negative numbers; row 2 holds"),
        ("mean_effect", None, r"map\.csv: missing column\(s\) mean_effect"),
    ],
)
def test_a_corrupted_map_is_refused_naming_file_and_column(mixers_dir, tmp_path, column, value, message):
    folder = tmp_path / "audit"
    shutil.copytree(mixers_dir, folder)
    table = pd.read_csv(folder / "map.csv")
    if value is None:
        table = table.drop(columns=[column])
    else:
        table[column] = table[column].astype(object)
        table.loc[1, column] = value
    table.to_csv(folder / "map.csv", index=False)
    _rehash(folder, "map.csv")
    out = tmp_path / "report"
    assert_one_line_error(run("report", folder, "--out", out), message)
    assert not out.exists()


def test_an_edited_map_without_a_new_manifest_is_refused(mixers_dir, tmp_path):
    folder = tmp_path / "audit"
    shutil.copytree(mixers_dir, folder)
    (folder / "map.csv").write_text((folder / "map.csv").read_text().replace("mixers.0", "mixers.9"))
    assert_one_line_error(run("report", folder, "--out", tmp_path / "report"), r"map\.csv")
