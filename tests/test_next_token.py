"""``--target next-token``: text windows against a hand split, effects against a hand loop over transformers' own
blocks, the logit lens against the model's own final norm and LM head, and the bad inputs."""

from __future__ import annotations

import functools
import json
from unittest import mock

import numpy as np
import pytest
import torch

from laya_eval.engine.plan import EvalOptions
from laya_eval.errors import ConfigError, DataError

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from tests.causal_lms import tiny_causal_lm, word_tokenizer  # noqa: E402

from laya_eval.language import evaluate_next_token  # noqa: E402
from laya_eval.language.text import read_documents, windows  # noqa: E402

DOCS = [
    "the cat sat on the mat and the dog sat on the rug and the cat sat",
    "a film about a cat",
    "the plot is thin",
    "short",
    "the dog and the cat are friends and they play in the park every day",
    "music and film and plot and music",
    "the acting is good",
    "a long trip to the sea and a long trip to the park and back",
    "the music is better",
    "the cat and the dog",
    "a cat on the mat",
]


def _louder(folder, family):
    """The tiny model with its blocks' matrices scaled up, so that removing a block changes the loss clearly."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder)
    with torch.no_grad():
        for block in model.base_model.h if family == "gpt2" else model.base_model.layers:
            for p in block.parameters():
                if p.dim() == 2:
                    p.mul_(8.0)
    model.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("lms")
    return {family: _louder(tiny_causal_lm(root / family, family, pad=True), family) for family in ("gpt2", "llama")}


@pytest.fixture(scope="module")
def text_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("text") / "docs.txt"
    path.write_text("\n\n".join(DOCS) + "\n")
    return path


def _options(**kw):
    base = dict(target="next-token", scope="network", ablation="skip", split="train", context=6, bootstrap=0)
    return EvalOptions(**{**base, **kw})


def test_plain_text_and_json_lines_give_the_same_documents(tmp_path):
    plain = tmp_path / "a.txt"
    plain.write_text("first line\nstill first\n\n  \n\nsecond\n\n\nthird\n")
    lines = tmp_path / "a.jsonl"
    lines.write_text("\n".join(json.dumps({"text": t}) for t in ["first line\nstill first", "second", "third"]))
    assert read_documents(str(plain))[0] == ["first line\nstill first", "second", "third"]
    assert read_documents(str(lines))[0] == ["first line\nstill first", "second", "third"]


def test_windows_are_a_hand_split_by_document_cut_at_the_context():
    tok = word_tokenizer()
    # The documented rule by hand: 11 documents, permutation of numpy's default_rng(0); 1 test, 1 val, 9 train.
    order = np.random.default_rng(0).permutation(len(DOCS))
    held = {"test": sorted(order[:1]), "val": sorted(order[1:2]), "train": sorted(order[2:])}
    seen = []
    for split, docs in held.items():
        got = windows(DOCS, tok, split=split, context=6, name="docs", source={})
        expected = []
        for d in docs:
            ids = tok(DOCS[d])["input_ids"]
            expected += [(d, s, ids[s : s + 6]) for s in range(0, len(ids), 6) if len(ids[s : s + 6]) >= 2]
        assert [(int(d), int(o), w.tolist()) for d, o, w in zip(got.document, got.offset, got.ids)] == expected
        seen += docs
    assert sorted(seen) == list(range(len(DOCS)))  # every document in exactly one split


@functools.lru_cache(maxsize=4)
def _model(lm_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(lm_dir, dtype=torch.float32).eval()


def _hand_losses(
    lm_dir, family, window: torch.Tensor, removed: tuple[int, ...], fill=None, states=None, length=None
) -> float:
    """Mean next-token loss of one window with the blocks ``removed`` skipped, by calling transformers' blocks.

    ``fill(i, h_in)``: what a removed block outputs instead (default: its input, ``skip``); ``states``: a list that
    receives every block's (input, output); ``length``: the window padded on the right with token id 0 to that
    length, the padding keys masked (the states a padded run computes)."""
    model = _model(lm_dir)
    n = window.numel()
    ids = window[None] if length is None else torch.nn.functional.pad(window, (0, length - n))[None]
    t = ids.shape[1]
    mask = torch.full((t, t), torch.finfo(torch.float32).min).triu(1)[None, None]  # causal, additive
    mask[..., n:] = torch.finfo(torch.float32).min  # no token reads a padding position
    pos = torch.arange(t)[None]
    with torch.no_grad():
        if family == "gpt2":
            body = model.transformer
            h = body.wte(ids) + body.wpe(pos)
            blocks, norm, extra = body.h, body.ln_f, {}
        else:  # the rotary families: transformers' own attribute names per family
            body = model.gpt_neox if family == "gpt_neox" else model.model
            h = (body.embed_in if family == "gpt_neox" else body.embed_tokens)(ids)
            blocks = body.layers
            norm = {"gpt_neox": "final_layer_norm", "phi": "final_layernorm"}.get(family, "norm")
            norm = getattr(body, norm)
            extra = {"position_embeddings": body.rotary_emb(h, position_ids=pos), "position_ids": pos}
        for i, block in enumerate(blocks):
            if i not in removed:
                out = block(h, attention_mask=mask, **extra)
            else:
                out = h if fill is None else fill(i, h)
            if states is not None:
                states.append((h, out))
            h = out
        logits = model.get_output_embeddings()(norm(h)).double()
    return float(torch.nn.functional.cross_entropy(logits[0, : n - 1], ids[0, 1:n]))


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_skip_effects_and_deletion_equal_a_hand_loop_over_transformers_blocks(models, text_file, family):
    torch.set_num_threads(1)
    result = evaluate_next_token(
        f"hf:{models[family]}", f"text:{text_file}", options=_options(methods=("random",), limit=5)
    )["skip"]
    tok = word_tokenizer(pad=True)
    docs, _ = read_documents(str(text_file))
    text = windows(docs, tok, split="train", context=6, name="docs", source={})
    layers = result.layers.sort_values(["sample", "layer"])
    n_layers = 3  # tests/causal_lms.py FAMILIES
    effects = layers["effect"].to_numpy().reshape(-1, n_layers)
    hand = np.array(
        [
            [
                _hand_losses(models[family], family, torch.tensor(w), (i,))
                - _hand_losses(models[family], family, torch.tensor(w), ())
                for i in range(n_layers)
            ]
            for w in text.ids[:5]
        ]
    )
    scale = np.abs(hand).max()
    assert scale > 1e-2  # removing a block matters in these models: the comparison is not of zeros
    np.testing.assert_allclose(effects, hand, rtol=0, atol=1e-6 * scale)
    # Deletion@2 of the random ranking: its two top-scored blocks removed together.
    scores = layers["attribution"].to_numpy().reshape(-1, n_layers)
    samples = result.samples.sort_values("sample")
    assert samples["loss"].to_numpy() == pytest.approx(
        [_hand_losses(models[family], family, torch.tensor(w), ()) for w in text.ids[:5]], abs=1e-6
    )
    top1 = [tuple(np.argsort(-s, kind="stable")[:1]) for s in scores]
    d1 = [
        _hand_losses(models[family], family, torch.tensor(w), r)
        - _hand_losses(models[family], family, torch.tensor(w), ())
        for w, r in zip(text.ids[:5], top1)
    ]
    np.testing.assert_allclose(samples["deletion_at_1"].to_numpy(), d1, rtol=0, atol=1e-6 * scale)
    top2 = [tuple(np.argsort(-s, kind="stable")[:2]) for s in scores]
    d2 = [
        _hand_losses(models[family], family, torch.tensor(w), r)
        - _hand_losses(models[family], family, torch.tensor(w), ())
        for w, r in zip(text.ids[:5], top2)
    ]
    assert result.summary["deletion_at_2"].iloc[0] == pytest.approx(np.mean(d2), abs=1e-6 * scale)


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_the_hand_loop_is_the_models_own_loss(models, family):
    window = torch.tensor([2, 5, 7, 3, 9, 4])
    own = _model(models[family])(input_ids=window[None], labels=window[None]).loss
    assert _hand_losses(models[family], family, window, ()) == pytest.approx(float(own.detach()), abs=1e-6)


def _hand_lens(lm_dir, family, window: torch.Tensor) -> list[float]:
    """Loss of the LM head reading the input of block 1 and each block's output through the final norm."""
    model = _model(lm_dir)
    ids = window[None]
    states = model(input_ids=ids, output_hidden_states=True).hidden_states  # embeddings, blocks 1..L-1, normed last
    norm = model.transformer.ln_f if family == "gpt2" else model.model.norm
    with torch.no_grad():
        raw = list(states[:-1])
        last = {}
        block = (model.transformer.h if family == "gpt2" else model.model.layers)[-1]
        handle = block.register_forward_hook(lambda m, a, out: last.setdefault("h", out))
        model(input_ids=ids)
        handle.remove()
        raw.append(last["h"])
        losses = []
        for h in raw:
            logits = model.lm_head(norm(h)).double()
            losses.append(float(torch.nn.functional.cross_entropy(logits[0, :-1], ids[0, 1:])))
    return losses


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_logit_lens_is_the_fall_of_the_loss_of_the_head_reading_each_block(models, text_file, family):
    torch.set_num_threads(1)
    result = evaluate_next_token(
        f"hf:{models[family]}", f"text:{text_file}", options=_options(methods=("logit_lens",), limit=4)
    )["skip"]
    docs, _ = read_documents(str(text_file))
    text = windows(docs, word_tokenizer(pad=True), split="train", context=6, name="docs", source={})
    got = result.layers.sort_values(["sample", "layer"])["attribution"].to_numpy().reshape(-1, 3)
    hand = np.array(
        [
            np.subtract(*np.array(_hand_lens(models[family], family, torch.tensor(w)))[[[0, 1, 2], [1, 2, 3]]])
            for w in text.ids[:4]
        ]
    )
    np.testing.assert_allclose(got, hand, rtol=0, atol=1e-6)


def test_integrated_gradients_sum_to_the_skip_effect(models, text_file):
    """Completeness: IG from the removed block to the intact one integrates the loss change exactly (one block
    at a time), so with enough steps it equals the measured effect."""
    torch.set_num_threads(1)
    result = evaluate_next_token(
        f"hf:{models['gpt2']}", f"text:{text_file}", options=_options(methods=("ig",), limit=3, n_steps=96)
    )["skip"]
    np.testing.assert_allclose(result.layers["attribution"], result.layers["effect"], rtol=0, atol=1e-4)


@pytest.fixture(scope="module")
def encoder_dir(tmp_path_factory):
    from transformers import BertConfig, BertModel

    folder = tmp_path_factory.mktemp("bert")
    config = BertConfig(vocab_size=40, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32)
    BertModel(config).save_pretrained(folder)
    word_tokenizer(pad=True).save_pretrained(folder)
    return folder


def _bad_inputs(models, text_file, encoder_dir, tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n")
    one_token = tmp_path / "short.txt"
    one_token.write_text("film\n\ngood\n\nplot\n")  # one token each
    no_tokenizer = tmp_path / "no-tokenizer"
    no_tokenizer.mkdir()
    for name in ("config.json", "model.safetensors"):
        (no_tokenizer / name).write_bytes((models["gpt2"] / name).read_bytes())
    checkpoint = tmp_path / "ckpt.pt"
    checkpoint.write_bytes(b"not read")
    lm, text = f"hf:{models['gpt2']}", f"text:{text_file}"
    nt = ("--target", "next-token", "--context", "6", "--split", "train")
    return [
        ((lm, "--data", f"text:{empty}", *nt), DataError, r"holds no text"),
        ((lm, "--data", f"text:{one_token}", *nt), DataError, r"no document of two tokens or more"),
        (
            (lm, "--data", text, "--target", "next-token", "--context", "65"),
            ConfigError,
            r"at most the model's 64 positions; got 65",
        ),
        ((f"hf:{encoder_dir}", "--data", text, *nt), ConfigError, r"needs a causal language model.*bert model"),
        ((str(checkpoint), "--data", text, *nt), ConfigError, r"given as hf:DIR; got .*ckpt\.pt"),
        ((f"hf:{no_tokenizer}", "--data", text, *nt), ConfigError, r"no tokenizer"),
        ((lm, "--data", "digits", *nt), DataError, r"--data text:FILE .*got 'digits'"),
        ((lm, "--data", text, "--context", "6"), DataError, r"add --target next-token"),
        ((lm, "--data", "digits"), ConfigError, r"causal language model without a classifier head"),
        ((lm, "--data", text, *nt, "--scope", "head"), ConfigError, r"use --scope network; got 'head'"),
        (
            (lm, "--data", text, *nt, "--ablation", "resample", "--limit", "1"),
            ConfigError,
            r"--ablation resample draws donors from the other evaluated windows; got 1 window",
        ),
        ((lm, "--data", text, *nt, "--ablation", "gate"), ConfigError, r"defined at network scope.*got 'gate'"),
        ((lm, "--data", text, *nt, "--methods", "laya"), ConfigError, r"got 'laya'"),
        ((lm, "--data", text, *nt, "--resume"), ConfigError, r"--resume is not available with --target next-token"),
    ]


def test_bad_input_is_one_line_exit_2_before_any_work(models, text_file, encoder_dir, tmp_path, monkeypatch):
    from laya_eval.language import evaluation
    from tests.cli_helpers import assert_one_line_error, run

    def no_work(*args, **kwargs):
        raise AssertionError("the work started")

    monkeypatch.setattr(evaluation, "_collect", no_work)
    for args, _, pattern in _bad_inputs(models, text_file, encoder_dir, tmp_path):
        out = tmp_path / "out"
        assert_one_line_error(run("faithfulness", *args, "--out", out), pattern)
        assert not out.exists()


def test_prune_refuses_a_classifier_target_on_a_causal_lm_and_text_for_a_classifier(models, text_file):
    from tests.cli_helpers import assert_one_line_error, run

    result = run(
        "prune", f"hf:{models['gpt2']}", "--data", f"text:{text_file}", "--target", "next-token", "--context", "65"
    )
    assert_one_line_error(result, r"at most the model's 64 positions")


def test_prune_perplexity_and_the_greedy_oracle_equal_a_hand_loop(models, text_file, tmp_path):
    from laya_eval import PruneOptions, prune_next_token

    torch.set_num_threads(1)
    lm = models["gpt2"]
    options = PruneOptions(target="next-token", context=6, bootstrap=50, n_random=2, methods=("block_influence",))
    result = prune_next_token(f"hf:{lm}", f"text:{text_file}", options=options, out=tmp_path / "p", limit=4)
    docs, _ = read_documents(str(text_file))
    tok = word_tokenizer(pad=True)
    val, test = (windows(docs, tok, split=s, context=6, name="d", source={}).take(4) for s in ("val", "test"))

    def mean_loss(ws, removed):  # token-weighted, as perplexity is defined
        losses = [_hand_losses(lm, "gpt2", torch.tensor(w), tuple(removed)) for w in ws.ids]
        return np.average(losses, weights=[w.size - 1 for w in ws.ids])

    removed = []  # the oracle by hand: greedy on the validation windows
    for _ in range(2):
        left = [i for i in range(3) if i not in removed]
        removed.append(min(left, key=lambda i: mean_loss(val, removed + [i])))
    oracle = removed + [i for i in range(3) if i not in removed]
    assert result.orders["oracle"] == [i + 1 for i in oracle]
    table = result.table.set_index(["method", "k_removed"])
    for name in ("oracle", "block_influence"):
        order = [i - 1 for i in result.orders[name]]
        for k in range(3):
            expected = np.exp(mean_loss(test, order[:k]))
            assert table.loc[(name, k), "perplexity"] == pytest.approx(expected, rel=1e-6)
    assert sorted(p.name for p in result.files) == [
        "manifest.json",
        "pruning.csv",
        "pruning.png",
        "pruning_comparisons.csv",
        "pruning_summary.csv",
    ]
    assert set(result.summary["method"]) == {"block_influence", "oracle", "random"}


def test_faithfulness_and_prune_next_token_from_the_command_line(models, text_file, tmp_path):
    import pandas as pd

    from tests.cli_helpers import run

    lm, text = f"hf:{models['llama']}", f"text:{text_file}"
    common = ("--target", "next-token", "--context", "6", "--bootstrap", "50")
    result = run(
        "faithfulness",
        lm,
        "--data",
        text,
        *common,
        "--split",
        "train",
        "--limit",
        "4",
        "--ig-steps",
        "4",
        "--out",
        tmp_path / "f",
        "--quiet",
    )
    assert result.exit_code == 0, result.output
    assert "ablation skip, scope network" in result.output and "mean next-token loss" in result.output
    samples = pd.read_csv(tmp_path / "f" / "samples.csv")
    assert list(samples.columns[:5]) == ["sample", "document", "offset", "tokens", "loss"]
    assert set(samples["method"]) == set(
        ("block_influence", "angular_distance", "grad_x_act", "atp", "ig", "logit_lens", "random")
    )
    result = run(
        "prune",
        lm,
        "--data",
        text,
        *common,
        "--limit",
        "3",
        "--methods",
        "block_influence,logit_lens",
        "--out",
        tmp_path / "p",
    )
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[1].split()[:4] == ["ranking", "k=0", "k=1", "k=2"]
    assert (tmp_path / "p" / "pruning.png").stat().st_size > 0


def test_rotten_tomatoes_snippets_are_documents_in_file_order(tmp_path):
    import bz2

    rows = [("fresh", "a good film"), ("plot", "a cat goes to sea"), ("rotten", "dull, slow")]
    csv_text = "category,text,movie_name,has_plot_and_reviews\n" + "".join(f'{c},"{t}",m,True\n' for c, t in rows)
    (tmp_path / "rotten_tomatoes_corpus_full.csv.bz2").write_bytes(bz2.compress(csv_text.encode()))
    docs, source = read_documents("rotten-tomatoes", tmp_path)
    assert docs == [t for _, t in rows]  # reviews and plot synopses alike
    assert source["source"].endswith("rotten_tomatoes_corpus_full.csv.bz2")


def test_windows_do_not_depend_on_the_batch_size(models, text_file):
    """The same bytes at batch sizes 2 and 16, the drawn removals included (their donors and noise are drawn per
    window, and attribution patching averages over the same draws)."""
    torch.set_num_threads(1)
    ablations = ("skip", "resample-update", "noise")
    runs = [
        evaluate_next_token(
            f"hf:{models['gpt2']}",
            f"text:{text_file}",
            options=_options(
                methods=("block_influence", "grad_x_act", "atp"), limit=6, batch_size=b, ablation=ablations, draws=3
            ),
        )
        for b in (2, 16)
    ]
    for a in ablations:
        assert runs[0][a].layers.equals(runs[1][a].layers)
        assert runs[0][a].samples.equals(runs[1][a].samples)


def test_zero_and_mean_update_effects_equal_a_hand_loop(models, text_file):
    """The other removals: a block's output replaced by zeros, or its update by its mean over the evaluated
    windows' tokens (computed here from the blocks' own outputs)."""
    torch.set_num_threads(1)
    lm = models["gpt2"]
    got = evaluate_next_token(
        f"hf:{lm}",
        f"text:{text_file}",
        options=_options(methods=("random",), limit=3, ablation=("zero", "mean-update")),
    )
    docs, _ = read_documents(str(text_file))
    text = windows(docs, word_tokenizer(pad=True), split="train", context=6, name="d", source={}).take(3)
    sums, count = [torch.zeros(32, dtype=torch.float64) for _ in range(3)], 0
    for w in text.ids:
        states = []
        _hand_losses(lm, "gpt2", torch.tensor(w), (), states=states)
        count += w.size
        for i, (x, h) in enumerate(states):
            sums[i] += (h - x)[0].double().sum(0)
    mean_update = [(v / count).float() for v in sums]
    fills = {"zero": lambda i, x: torch.zeros_like(x), "mean-update": lambda i, x: x + mean_update[i]}
    for ablation, fill in fills.items():
        hand = np.array(
            [
                [
                    _hand_losses(lm, "gpt2", torch.tensor(w), (i,), fill=fill)
                    - _hand_losses(lm, "gpt2", torch.tensor(w), ())
                    for i in range(3)
                ]
                for w in text.ids
            ]
        )
        effects = got[ablation].layers.sort_values(["sample", "layer"])["effect"].to_numpy().reshape(-1, 3)
        scale = np.abs(hand).max()
        assert scale > 1e-2
        np.testing.assert_allclose(effects, hand, rtol=0, atol=1e-6 * scale)


@pytest.fixture(scope="module")
def more_models(tmp_path_factory):
    root = tmp_path_factory.mktemp("families")
    return {
        f: _louder(tiny_causal_lm(root / f, f, pad=True), f)
        for f in ("mistral", "qwen2", "qwen3", "phi", "olmo", "gpt_neox")
    }


@pytest.mark.parametrize("family", ["mistral", "qwen2", "qwen3", "phi", "olmo", "gpt_neox"])
def test_skip_effects_of_every_family_equal_a_hand_loop(more_models, text_file, family):
    torch.set_num_threads(1)
    lm = more_models[family]
    result = evaluate_next_token(f"hf:{lm}", f"text:{text_file}", options=_options(methods=("random",), limit=3))[
        "skip"
    ]
    docs, _ = read_documents(str(text_file))
    text = windows(docs, word_tokenizer(pad=True), split="train", context=6, name="d", source={}).take(3)
    n_layers = 2  # tests/causal_lms.py FAMILIES
    effects = result.layers.sort_values(["sample", "layer"])["effect"].to_numpy().reshape(-1, n_layers)
    intact = [_hand_losses(lm, family, torch.tensor(w), ()) for w in text.ids]
    hand = np.array(
        [
            [_hand_losses(lm, family, torch.tensor(w), (i,)) - base for i in range(n_layers)]
            for w, base in zip(text.ids, intact)
        ]
    )
    own = [
        float(_model(lm)(input_ids=torch.tensor(w)[None], labels=torch.tensor(w)[None]).loss.detach()) for w in text.ids
    ]
    assert intact == pytest.approx(own, abs=1e-6)  # the hand loop is the model
    scale = np.abs(hand).max()
    assert scale > 1e-3
    np.testing.assert_allclose(effects, hand, rtol=0, atol=1e-6 * scale)


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_leave_one_out_starts_at_the_removed_block(models, text_file, family):
    """Block calls counted by hooks on transformers' blocks: removing block f runs blocks f+1 .. L-1 only (the
    blocks before it give their kept outputs, block f's whole output is its fill), so the leave-one-out removals of
    a window cost L(L-1)/2 block calls (L^2 from the input), with the same losses."""
    from laya_eval.language.decoder import SKIP, load_causal_lm, run_windows
    from laya_eval.language.passes import batches, removal_scales, shared_losses

    lm = load_causal_lm(f"hf:{models[family]}")
    data = windows(DOCS, lm.tokenizer, split="train", context=6, name="docs", source={})
    (batch,) = batches(data, len(data), torch.device("cpu"))
    n, n_layers = batch.ids.shape[0], lm.n_layers
    calls = []
    # one entry per block call: the rows it ran (a block evaluation per window)
    handles = [b.register_forward_hook(lambda m, a, out: calls.append(out.shape[0])) for b in lm.parts.blocks]
    try:
        with torch.no_grad():
            kept = run_windows(lm, batch.ids, batch.mask, keep=True).outputs
        intact = sum(calls)
        scales = [removal_scales(n, n_layers, batch.ids.device)]
        (started,) = shared_losses(lm, batch, scales, SKIP, rows=1000, kept=kept)
        from_start = sum(calls) - intact
        (from_input,) = shared_losses(lm, batch, scales, SKIP, rows=1000)
        from_input_calls = sum(calls) - intact - from_start
    finally:
        for h in handles:
            h.remove()
    assert intact == n * n_layers
    assert from_start == n * sum(n_layers - 1 - f for f in range(n_layers)) == n * n_layers * (n_layers - 1) // 2
    assert from_input_calls == n * n_layers * n_layers
    # float32 blocks: the two routes round differently (the kept blocks' outputs are the intact pass's own)
    assert float((started - from_input).abs().max()) <= 1e-6 * float(from_input.abs().max())
    # the blocks are the model's own again afterwards
    assert all(type(b).__name__ != "_KeptOutput" for b in lm.parts.blocks)


def test_prune_takes_attribution_patching_for_a_language_model_only():
    from laya_eval import PruneOptions

    assert PruneOptions(target="next-token", methods=("atp", "logit_lens")).methods == ("atp", "logit_lens")
    with pytest.raises(ConfigError, match="method 'atp' estimates the effect of the evaluation's ablation"):
        PruneOptions(methods=("atp",))


def _recorded_draws(lm, family, text_file, tmp_path, limit=None, draws=2):
    """A run of resample-update and noise with --save-draws; the draws it records (donors.csv, noise_draws.npz)."""
    import pandas as pd

    options = _options(
        methods=("random",), limit=limit, draws=draws, ablation=("resample-update", "noise"), save_draws=True
    )
    got = evaluate_next_token(f"hf:{lm}", f"text:{text_file}", options=options, out=tmp_path / "o")
    donors = pd.read_csv(tmp_path / "o" / "resample-update" / "donors.csv")
    noise = dict(np.load(tmp_path / "o" / "noise" / "noise_draws.npz"))
    return got, donors.pivot(index="sample", columns="draw", values="donor").to_numpy(), noise


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_drawn_effects_equal_a_hand_loop_with_the_recorded_draws(models, text_file, tmp_path, family):
    """resample-update and noise: the mean over the draws of the loss rise, by a hand loop over transformers'
    blocks that puts in the donors' updates (the donors run by hand, padded as the run pads them) and the noise the
    run recorded."""
    torch.set_num_threads(1)
    lm, draws = models[family], 2
    # two documents (each split holds both): windows of 6, 6, 3 and 4 tokens, so some donors are shorter (no
    # window of two tokens: a loss over one position would leave float32 rounding unaveraged)
    uneven = tmp_path / "uneven.txt"
    uneven.write_text("the film was good and the cast was great but the plot was very thin\n\na dull sad story\n")
    got, donors, noise = _recorded_draws(lm, family, uneven, tmp_path, draws=draws)
    docs, _ = read_documents(str(uneven))
    text = windows(docs, word_tokenizer(pad=True), split="train", context=6, name="d", source={})
    length, n = max(w.size for w in text.ids), len(text)
    assert sorted(w.size for w in text.ids) == [3, 4, 6, 6]
    assert donors.shape == (n, draws) and not (donors == np.arange(n)[:, None]).any()  # never the window itself
    sizes = np.array([w.size for w in text.ids])
    assert (sizes[donors] < sizes[:, None]).any()  # a donor shorter than its window: its padding states are read
    padded = []  # every window's (input, output) per block, padded to the run's length
    for w in text.ids:
        padded.append([])
        _hand_losses(lm, family, torch.tensor(w), (), states=padded[-1], length=length)
    intact = [_hand_losses(lm, family, torch.tensor(w), ()) for w in text.ids]

    def update_of(g, j):  # draw j of window g: the donor's update added to the block's input
        return lambda i, x: x + (padded[donors[g, j]][i][1] - padded[donors[g, j]][i][0])[:, : x.shape[1]]

    def noise_of(g, j):  # draw j of window g: the recorded noise at the window's positions
        return lambda i, x: torch.tensor(noise[f"layer_{i + 1}"][g, j, : x.shape[1]])[None]

    for ablation, fill_of in (("resample-update", update_of), ("noise", noise_of)):
        hand = np.array(
            [
                [
                    np.mean(
                        [
                            _hand_losses(lm, family, torch.tensor(w), (i,), fill=fill_of(g, j)) - intact[g]
                            for j in range(draws)
                        ]
                    )
                    for i in range(3)
                ]
                for g, w in enumerate(text.ids)
            ]
        )
        effects = got[ablation].layers.sort_values(["sample", "layer"])["effect"].to_numpy().reshape(n, 3)
        scale = np.abs(hand).max()
        assert scale > 1e-2
        np.testing.assert_allclose(effects, hand, rtol=0, atol=1e-6 * scale)


def test_noise_has_the_moments_of_the_block_outputs_over_real_tokens(models, text_file, tmp_path):
    """The recorded noise, standardised by the per-feature mean and standard deviation of each block's output over
    the windows' real tokens (computed here from the blocks' own outputs), is standard normal, independent across
    windows, draws and positions."""
    torch.set_num_threads(1)
    lm = models["gpt2"]
    _, _, noise = _recorded_draws(lm, "gpt2", text_file, tmp_path, limit=6, draws=8)
    docs, _ = read_documents(str(text_file))
    text = windows(docs, word_tokenizer(pad=True), split="train", context=6, name="d", source={}).take(6)
    outputs = [[], [], []]
    for w in text.ids:
        states = []
        _hand_losses(lm, "gpt2", torch.tensor(w), (), states=states)
        for i, (_, h) in enumerate(states):
            outputs[i].append(h[0].double())
    for i in range(3):
        real = torch.cat(outputs[i])
        z = (noise[f"layer_{i + 1}"] - real.mean(0).numpy()) / real.std(0, unbiased=False).numpy()
        assert noise[f"layer_{i + 1}"].shape == (6, 8, 6, 32)
        assert abs(z.mean()) < 0.05 and abs(z.std() - 1) < 0.05  # 9216 values: both within ~5 standard errors
        assert abs(np.corrcoef(z[:, 0].reshape(-1), z[:, 1].reshape(-1))[0, 1]) < 0.1  # draws independent
        assert abs(np.corrcoef(z[:, :, 0].reshape(-1), z[:, :, 1].reshape(-1))[0, 1]) < 0.1  # positions too


def test_integrated_gradients_sum_to_the_drawn_effect(models, text_file):
    """For a drawn removal IG is the mean over the draws of IG from each draw's fill: by completeness it sums to
    the mean loss rise over the draws, the effect."""
    torch.set_num_threads(1)
    result = evaluate_next_token(
        f"hf:{models['gpt2']}",
        f"text:{text_file}",
        options=_options(methods=("ig",), limit=2, n_steps=96, ablation="noise-update", draws=2),
    )["noise-update"]
    np.testing.assert_allclose(result.layers["attribution"], result.layers["effect"], rtol=0, atol=1e-4)


def test_a_drawn_removal_from_the_command_line(models, text_file, tmp_path):
    import pandas as pd

    from tests.cli_helpers import run

    out = tmp_path / "f"
    args = ("--target", "next-token", "--context", "6", "--split", "train", "--limit", "3", "--bootstrap", "0")
    result = run(
        "faithfulness",
        f"hf:{models['gpt2']}",
        "--data",
        f"text:{text_file}",
        *args,
        "--ablation",
        "resample-update",
        "--draws",
        "2",
        "--methods",
        "block_influence",
        "--out",
        out,
        "--quiet",
    )
    assert result.exit_code == 0, result.output
    assert "ablation resample-update, scope network" in result.output
    donors = pd.read_csv(out / "donors.csv")
    assert list(donors.columns) == ["sample", "draw", "donor"] and len(donors) == 3 * 2
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["effect"].endswith("the mean over 2 seeded draws per window of that rise")


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_the_graph_a_window_keeps_is_measured_at_least_its_known_tensors(models, family):
    """The bytes a call with gradients is sized on cover at least the tensors worked out by hand that autograd must
    keep for one window: the loss's float64 log-probabilities ((T - 1) x V) and one (T, d) float32 state per block
    (each block saves its input for its first norm or attention)."""
    from laya_eval.language.decoder import load_causal_lm
    from laya_eval.language.passes import row_chunk, saved_bytes

    lm = load_causal_lm(f"hf:{models[family]}")
    t = 6
    vocab = lm.model.get_output_embeddings().weight.shape[0]
    width = lm.parts.embeddings.weight.shape[1]
    floor = 8 * (t - 1) * vocab + 4 * t * width * lm.n_layers
    measured = saved_bytes(lm, t)
    assert measured >= floor
    assert measured < 100 * floor  # the weights are not counted (they are far larger than a 6-token window's graph)
    assert row_chunk(lm, t, 64, gradients=True) == max(1, (64 << 20) // (4 * measured))


def test_the_intact_pass_runs_backward_only_for_methods_that_read_gradients(models, text_file):
    """Backward calls counted by hooks on the blocks: none when no method reads gradients, some with grad_x_act; the
    effects are the same either way."""
    from laya_eval.language import decoder

    calls = []
    original = decoder.load_causal_lm

    def counted(*args, **kwargs):
        lm = original(*args, **kwargs)
        for block in lm.parts.blocks:
            block.register_full_backward_hook(lambda m, gi, go: calls.append(1))
        return lm

    torch.set_num_threads(1)
    runs = {}
    for methods in (("random", "block_influence"), ("random", "grad_x_act")):
        calls.clear()
        with mock.patch("laya_eval.language.evaluation.load_causal_lm", counted):
            result = evaluate_next_token(
                f"hf:{models['llama']}", f"text:{text_file}", options=_options(methods=methods, limit=4)
            )["skip"]
        runs[methods[1]] = (len(calls), result.layers.sort_values(["sample", "layer"]))
    assert runs["block_influence"][0] == 0
    assert runs["grad_x_act"][0] > 0
    a, b = runs["block_influence"][1], runs["grad_x_act"][1]
    np.testing.assert_array_equal(a["effect"].to_numpy(), b["effect"].to_numpy())


def test_pruning_curves_start_at_the_first_removed_block(models, text_file):
    """Block calls counted by hooks: a pruning curve over an order (k = 0 … L-1 removals) runs the intact pass once
    (L per window), and after k removals only the blocks after the first removed one, min(order[:k]) (its fill
    needs no run), with the losses of runs from the input."""
    from laya_eval.language.decoder import SKIP, load_causal_lm
    from laya_eval.language.passes import batches, losses_under
    from laya_eval.language.pruning import _curves, _prefix_scales

    lm = load_causal_lm(f"hf:{models['llama']}")
    data = windows(DOCS, lm.tokenizer, split="train", context=6, name="docs", source={})
    (batch,) = batches(data, len(data), torch.device("cpu"))
    n, n_layers = batch.ids.shape[0], lm.n_layers
    order = np.array([2, 0, 1])
    calls = []
    handles = [b.register_forward_hook(lambda m, a, out: calls.append(out.shape[0])) for b in lm.parts.blocks]
    try:
        (curve,) = _curves(lm, [batch], [order], rows=1000, keep_rows=1000)
    finally:
        for h in handles:
            h.remove()
    # k = 0 is the intact pass's own rows (no call); k = 1 removes block 2 (no block after it runs); k = 2 removes
    # blocks 2 and 0, so it starts at block 0 (blocks 1 and 2 run, block 2's output replaced afterwards)
    assert sum(calls) == n * (n_layers + 0 + 0 + 2)
    from_input = losses_under(lm, batch, _prefix_scales(order, n, batch.ids.device), SKIP, 1000).numpy()
    np.testing.assert_allclose(curve, from_input, rtol=0, atol=1e-6 * np.abs(from_input).max())


def test_the_unigram_baseline_is_fitted_on_the_train_split_and_smoothed(models, text_file):
    """The unigram loss beside the model's: token counts of the train split's windows (add-one over the vocabulary)
    scoring the evaluated test windows' predicted tokens, worked out by hand with a Counter."""
    import math
    from collections import Counter

    from laya_eval.language.decoder import load_causal_lm

    lm = load_causal_lm(f"hf:{models['gpt2']}")
    docs, _ = read_documents(str(text_file))
    train = windows(docs, lm.tokenizer, split="train", context=6, name="docs", source={})
    test = windows(docs, lm.tokenizer, split="test", context=6, name="docs", source={})
    vocab = lm.model.get_output_embeddings().weight.shape[0]
    counts = Counter(int(t) for w in train.ids for t in w)
    total = sum(counts.values())
    targets = [int(t) for w in test.ids for t in w[1:]]
    hand = -sum(math.log((counts[t] + 1) / (total + vocab)) for t in targets) / len(targets)
    result = evaluate_next_token(
        f"hf:{models['gpt2']}", f"text:{text_file}", options=_options(methods=("random",), split="test")
    )["skip"]
    record = result.manifest["model"]
    assert record["unigram_loss"] == pytest.approx(hand, rel=1e-12)
    assert "train split" in record["unigram_fit"]
    own = evaluate_next_token(f"hf:{models['gpt2']}", f"text:{text_file}", options=_options(methods=("random",)))
    assert "in-sample" in own["skip"].manifest["model"]["unigram_fit"]


def test_report_reads_a_next_token_folder_and_names_its_effect(models, text_file, tmp_path):
    """`laya-eval report` on a next-token faithfulness folder: it reads the windows' samples table (document,
    offset, tokens, loss instead of label and prediction) and calls the effect a rise of the loss, in nats."""
    from tests.cli_helpers import run

    out = tmp_path / "nt"
    nt = ("--target", "next-token", "--context", "6", "--split", "train", "--methods", "random,block_influence")
    assert run("faithfulness", f"hf:{models['gpt2']}", "--data", f"text:{text_file}", *nt, "--out", out).exit_code == 0
    result = run("report", out, "--out", tmp_path / "rep")
    assert result.exit_code == 0, result.output
    text = (tmp_path / "rep" / "report.md").read_text()
    assert "### Deletion@1 (rise of the next-token loss, nats)" in text
    assert "the rise of the mean next-token loss, in nats" in text
    assert "predicted class" not in text


@pytest.mark.slow
@pytest.mark.xdist_group("torchrun")
def test_two_processes_under_torchrun_write_the_same_next_token_tables(models, text_file, tmp_path):
    """Each rank evaluates its shard of the windows, rank 0 writes: the tables equal one process's byte for byte,
    with a removal that needs dataset statistics (summed over the ranks) and a drawn one (donors from any shard)."""
    import os
    import subprocess
    import sys

    args = ["faithfulness", f"hf:{models['llama']}", "--data", f"text:{text_file}", "--target", "next-token"]
    args += ["--context", "6", "--split", "train", "--ablation", "mean-update,resample-update", "--draws", "2"]
    args += ["--methods", "random,block_influence,atp", "--bootstrap", "20", "--quiet"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "LAYA_EVAL_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    one = subprocess.run(
        [sys.executable, "-m", "laya_eval_cli", *args, "--out", str(tmp_path / "one")],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert one.returncode == 0, one.stderr
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    two = subprocess.run(
        [*torchrun, "-m", "laya_eval_cli", *args, "--out", str(tmp_path / "two")],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert two.returncode == 0, two.stderr
    for ablation in ("mean-update", "resample-update"):
        for name in ("layers.csv", "samples.csv", "summary.csv", "comparisons.csv"):
            a, b = (tmp_path / run / ablation / name for run in ("one", "two"))
            assert a.read_bytes() == b.read_bytes(), (ablation, name)


def test_a_model_call_makes_at_most_32_mb_of_logits(models):
    """Rows per call without gradients: the budget would allow thousands of these tiny rows, but a call's float32
    logits stay within 32 MB (worked out by hand: rows x tokens x vocabulary x 4 bytes), so they come from the
    process's heap rather than fresh pages."""
    from laya_eval.language.decoder import load_causal_lm
    from laya_eval.language.passes import row_chunk

    lm = load_causal_lm(f"hf:{models['gpt2']}")
    vocab = lm.model.get_output_embeddings().weight.shape[0]
    rows = row_chunk(lm, 6, 2048)
    assert rows == (32 << 20) // (4 * 6 * vocab)
    assert rows * 6 * vocab * 4 <= 32 << 20 < (rows + 1) * 6 * vocab * 4
