"""Causal LMs on the command line: fit-head (last-token pooling by default), network-scope faithfulness, sanity
and prune on the checkpoint; hostile or incomplete model folders refused in one line before any work."""

from __future__ import annotations

import json

import pytest
import torch

from laya_eval.errors import DefaultedWarning
from tests.causal_lms import tiny_causal_lm
from tests.cli_helpers import assert_one_line_error, run
from tests.test_data import rt_csv_bz2, rt_rows, write_wheel

transformers = pytest.importorskip("transformers")


@pytest.fixture
def reviews(tmp_path):
    """A small Rotten Tomatoes wheel (50 reviews) to read with ``--data-dir``."""
    write_wheel(tmp_path / "rt", rt_csv_bz2(rt_rows()))
    return tmp_path / "rt"


def _fit_head(folder, reviews, out, cache, *extra):
    return run(
        "--threads",
        1,
        "fit-head",
        "--model",
        f"hf:{folder}",
        "--data",
        "rotten-tomatoes",
        "--data-dir",
        reviews,
        "--head",
        "laya",
        "--d-star",
        8,
        "--scorer-hidden",
        8,
        "--epochs",
        2,
        "--cache-dir",
        cache,
        "--out",
        out,
        *extra,
    )


@pytest.mark.slow
@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_fit_head_then_network_faithfulness_sanity_and_prune_on_a_causal_lm(tmp_path, reviews, family):
    folder = tiny_causal_lm(tmp_path / family, family, padding_side="left" if family == "llama" else "right")
    head, cache = tmp_path / "head.pt", tmp_path / "cache"
    if family == "gpt2":  # no pad token in its tokenizer: padded with eos, and said
        with pytest.warns(DefaultedWarning, match="no pad token; batches are padded with its end-of-text token"):
            result = _fit_head(folder, reviews, head, cache, "--layers", "layer*")
    else:
        result = _fit_head(folder, reviews, head, cache, "--layers", "layer*")  # skip needs blocks, not embeddings
    assert result.exit_code == 0, result.output
    payload = torch.load(head, weights_only=True)
    assert payload["config"]["backbone"]["kwargs"]["pooling"] == "last"
    common = ("--data-dir", reviews, "--methods", "contribution,random", "--bootstrap", 0, "--limit", 8)
    for ablation in ("skip", "zero"):
        out = tmp_path / f"net-{ablation}"
        result = run(
            "--threads", 1, "faithfulness", head, "--scope", "network", "--ablation", ablation, *common, "--out", out
        )
        assert result.exit_code == 0, result.output
        assert (out / "layers.csv").is_file()
    out = tmp_path / "head-scope"  # the pooled states from the feature cache fit-head filled: a lazy LM
    result = run("--threads", 1, "faithfulness", head, *common, "--cache-dir", cache, "--out", out)
    assert result.exit_code == 0, result.output
    quick = ("--data-dir", reviews, "--cache-dir", cache, "--methods", "laya,random", "--epochs", 1, "--bootstrap", 0)
    result = run("--threads", 1, "sanity", head, *quick, "--roar-seeds", 1, "--out", tmp_path / "sanity")
    assert result.exit_code == 0, result.output
    result = run("--threads", 1, "prune", head, *quick, "--seeds", 1, "--out", tmp_path / "prune")
    assert result.exit_code == 0, result.output
    assert "reused the feature cache" in result.output or (tmp_path / "prune").is_dir()


@pytest.mark.slow
def test_mean_pooling_of_a_causal_lm_is_another_cache_entry_and_recorded(tmp_path, reviews):
    folder = tiny_causal_lm(tmp_path / "llama", "llama", pad=True)
    cache = tmp_path / "cache"
    assert _fit_head(folder, reviews, tmp_path / "last.pt", cache).exit_code == 0
    result = _fit_head(folder, reviews, tmp_path / "mean.pt", cache, "--pool", "mean")
    assert result.exit_code == 0, result.output
    assert "encoded the data once into the feature cache" in result.output  # pooling is part of the key
    again = _fit_head(folder, reviews, tmp_path / "last-again.pt", cache)
    assert "reused the feature cache" in again.output
    payload = torch.load(tmp_path / "mean.pt", weights_only=True)
    assert payload["config"]["backbone"]["kwargs"]["pooling"] == "mean"


# --------------------------------------------------------------------------- hostile and incomplete folders
def _no_loading(monkeypatch):
    """Loading a model's weights or tokenizer fails the test: a refusal must come before."""

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded before the folder was refused")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", refuse)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", refuse)


def _edit_json(path, **changes):
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


@pytest.mark.parametrize("config", ["config.json", "tokenizer_config.json"])
def test_a_causal_lm_folder_asking_for_remote_code_is_refused(tmp_path, reviews, monkeypatch, config):
    folder = tiny_causal_lm(tmp_path / "gpt2", "gpt2")
    _edit_json(folder / config, auto_map={"AutoModelForCausalLM": "modeling_evil.EvilLM"})
    _no_loading(monkeypatch)
    result = _fit_head(folder, reviews, tmp_path / "head.pt", tmp_path / "cache")
    assert_one_line_error(result, rf"{config}' asks for custom model code \(auto_map\); laya-eval never runs remote")
    assert not (tmp_path / "head.pt").exists()


def test_a_causal_lm_folder_with_pickled_weights_only_is_refused(tmp_path, reviews, monkeypatch):
    folder = tiny_causal_lm(tmp_path / "llama", "llama", pad=True)
    (folder / "model.safetensors").unlink()
    torch.save({"w": torch.zeros(1)}, folder / "pytorch_model.bin")
    _no_loading(monkeypatch)
    result = _fit_head(folder, reviews, tmp_path / "head.pt", tmp_path / "cache")
    assert_one_line_error(result, r"holds pickled weights only \(pytorch_model.bin\); laya-eval reads safetensors only")
    assert not (tmp_path / "head.pt").exists()


def test_a_causal_lm_folder_without_a_tokenizer_is_refused(tmp_path, reviews, monkeypatch):
    folder = tiny_causal_lm(tmp_path / "gpt2", "gpt2")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (folder / name).unlink()
    _no_loading(monkeypatch)
    result = _fit_head(folder, reviews, tmp_path / "head.pt", tmp_path / "cache")
    assert_one_line_error(result, r"gpt2' has no tokenizer: looked for tokenizer.json, vocab.json, vocab.txt")
    assert not (tmp_path / "head.pt").exists()


def test_last_pooling_is_refused_for_a_py_model(tmp_path):
    result = run(
        "fit-head",
        "--model",
        "py:tests.byom_models:small_cnn",
        "--layers",
        "x",
        "--pool",
        "last",
        "--data",
        "digits",
        "--out",
        tmp_path / "h.pt",
    )
    assert_one_line_error(result, r"pool \(a py: model\) must be one of")


def test_a_defaulted_choice_is_one_warning_line(capsys):
    from laya_eval_cli.main import _one_line_warnings

    _one_line_warnings("the tokenizer of 'm' has no pad token", DefaultedWarning, "x.py", 1)
    assert capsys.readouterr().err == "Warning: the tokenizer of 'm' has no pad token\n"
