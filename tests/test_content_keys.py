"""Caches and checks keyed by content: code, model files, data; cache entries verified on read.

The oracles are independent of the cache: features are recomputed by hand from the factory's own
weights (a Linear then the activation, worked out with torch ops), or by a cache-less encoding.
"""

from __future__ import annotations

import dataclasses

import json
import os
import warnings

import numpy as np
import pytest
import torch

from laya_eval.data.dataset import Dataset
from laya_eval.errors import CheckpointError, ConfigError, RecomputedWarning
from laya_eval.loading.feature_cache import extract_features, feature_key

NET = """
import torch
from torch import nn

ACT = nn.{act}


def make():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 5), ACT(), nn.Linear(5, 4), ACT())
"""


def _data(n=24, d=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    return Dataset(
        x=torch.randn(n, d, generator=g), y=torch.arange(n) % 3, class_names=("a", "b", "c"), name="toy", split="train"
    )


def _by_hand(x, act):
    """Layer 1 and 3 of NET, from seed-0 weights: act(W1 x + b1), act(W2 h1 + b2)."""
    torch.manual_seed(0)
    l1, l2 = torch.nn.Linear(6, 5), torch.nn.Linear(5, 4)
    f = torch.relu if act == "ReLU" else torch.tanh
    h1 = f(x @ l1.weight.T + l1.bias)
    return [h1, f(h1 @ l2.weight.T + l2.bias)]


def _py_features(path, data, cache, sources=()):
    from laya_eval.loading.specs import load_backbone
    from laya_eval.training.head_fit import backbone_features

    backbone = load_backbone(
        f"py:{path}:make", layers=["1", "3"], example_input=data.x[:2], cache_dir=cache, sources=sources
    )
    return backbone_features(backbone, data, cache_dir=cache)


def test_a_py_factory_whose_code_changed_misses_the_cache(tmp_path):
    data, cache, path = _data(), tmp_path / "cache", tmp_path / "net.py"
    path.write_text(NET.format(act="ReLU"))
    first = _py_features(path, data, cache)
    assert not first.reused
    assert _py_features(path, data, cache).reused  # same code, same weights: a hit
    path.write_text(NET.format(act="Tanh"))  # same weights, other activation
    second = _py_features(path, data, cache)
    assert not second.reused
    for got, want in zip(second.hidden, _by_hand(data.x, "Tanh")):
        torch.testing.assert_close(got, want)
    for got, want in zip(first.hidden, _by_hand(data.x, "ReLU")):
        torch.testing.assert_close(got, want)


def test_an_extra_source_file_keys_the_cache(tmp_path):
    data, cache, path = _data(), tmp_path / "cache", tmp_path / "net.py"
    path.write_text(NET.format(act="ReLU"))
    helper = tmp_path / "pkg"
    helper.mkdir()
    (helper / "blocks.py").write_text("WIDTH = 5\n")
    assert not _py_features(path, data, cache, sources=[helper]).reused
    assert _py_features(path, data, cache, sources=[helper]).reused
    (helper / "blocks.py").write_text("WIDTH = 7\n")
    assert not _py_features(path, data, cache, sources=[helper]).reused


def test_a_checkpoint_of_changed_py_code_is_refused(tmp_path, monkeypatch):
    from laya_eval.loading.checkpoints import load_checkpoint, save_checkpoint
    from laya_eval.loading.specs import load_backbone
    from laya_eval.models.heads import make_head
    from laya_eval.models.layered import LayeredModel, ModelInfo

    path = tmp_path / "net.py"
    path.write_text(NET.format(act="ReLU"))
    backbone = load_backbone(f"py:{path}:make", layers=["1", "3"], example_input=torch.zeros(2, 6))
    info = ModelInfo(num_classes=3, class_names=("a", "b", "c"), input_shape=(6,), dataset=None)
    save_checkpoint(LayeredModel(backbone, make_head("concat", backbone.layer_dims, 3), info), tmp_path / "c.pt")
    load_checkpoint(tmp_path / "c.pt", trust_code=True)  # unchanged: loads
    path.write_text(NET.format(act="ReLU") + "\n# a comment changes the source\n")
    with pytest.raises(CheckpointError, match="referenced code of py:.* changed .*module"):
        load_checkpoint(tmp_path / "c.pt", trust_code=True)


# ------------------------------------------------------------------ hf: tokenizer files
WORDS = "the a film good bad great dull plot cast long quiet moving thin watch again".split()


def _tiny_bert(folder):
    transformers = pytest.importorskip("transformers")
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
    folder.mkdir()
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    tok = transformers.BertTokenizerFast(vocab={w: i for i, w in enumerate(vocab)}, do_lower_case=True)
    tok.save_pretrained(folder)
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=len(vocab),
        hidden_size=8,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=16,
        max_position_embeddings=32,
    )
    transformers.BertModel(config).save_pretrained(folder, safe_serialization=True)
    return folder


def _swap(folder, a="good", b="bad"):
    """Swap two words' ids in every vocabulary file (vocab.txt and tokenizer.json)."""
    words = (folder / "vocab.txt").read_text().split("\n")
    i, j = words.index(a), words.index(b)
    words[i], words[j] = words[j], words[i]
    (folder / "vocab.txt").write_text("\n".join(words))
    spec = json.loads((folder / "tokenizer.json").read_text())
    vocab = spec["model"]["vocab"]
    vocab[a], vocab[b] = vocab[b], vocab[a]
    (folder / "tokenizer.json").write_text(json.dumps(spec))


def _texts():
    rng = np.random.default_rng(0)
    x = [" ".join(rng.choice(WORDS, 6)) for _ in range(12)]
    return Dataset(x=x, y=torch.arange(12) % 2, class_names=("n", "p"), name="texts", split="train")


def test_an_hf_model_whose_vocabulary_changed_misses_the_cache(tmp_path):
    from laya_eval.models.backbones.hf import HFBackbone
    from laya_eval.training.head_fit import backbone_features

    folder, data, cache = _tiny_bert(tmp_path / "bert"), _texts(), tmp_path / "cache"
    before = backbone_features(HFBackbone(str(folder)), data, cache_dir=cache)
    assert not before.reused and backbone_features(HFBackbone(str(folder)), data, cache_dir=cache).reused
    _swap(folder)
    fresh_backbone = HFBackbone(str(folder))
    after = backbone_features(fresh_backbone, data, cache_dir=cache)
    assert not after.reused
    with torch.no_grad():
        oracle = fresh_backbone(data.x)  # a cache-less encoding with the swapped tokenizer
    for got, want in zip(after.hidden, oracle):
        torch.testing.assert_close(got, want)
    assert max(float((a - b).abs().max()) for a, b in zip(after.hidden, before.hidden)) > 1e-3


def test_the_text_probe_covers_the_vocabulary_and_catches_a_swap_alone(tmp_path):
    from laya_eval.loading.probe import check_probe, probe_record
    from laya_eval.models.backbones.hf import HFBackbone
    from laya_eval.models.heads import make_head
    from laya_eval.models.layered import LayeredModel, ModelInfo

    folder = _tiny_bert(tmp_path / "bert")
    info = ModelInfo(num_classes=2, class_names=("n", "p"), input_shape=None, dataset=None)
    torch.manual_seed(1)
    backbone = HFBackbone(str(folder))
    head = make_head("concat", backbone.layer_dims, 2)
    record = probe_record(LayeredModel(backbone, head, info))
    ids = set()
    for text in record["texts"]:
        ids |= set(backbone.tokenizer(text)["input_ids"])
    assert set(range(5, 5 + len(WORDS))) <= ids  # every non-special id of the vocabulary is probed
    _swap(folder)
    swapped = LayeredModel(HFBackbone(str(folder)), head, info)  # built without the recorded file hashes
    with pytest.raises(CheckpointError, match="other logits on the probe batch"):
        check_probe(swapped, record, "c.pt")


def test_an_hf_checkpoint_is_refused_after_a_vocabulary_swap(tmp_path):
    from laya_eval.loading.checkpoints import load_checkpoint, save_checkpoint
    from laya_eval.models.backbones.hf import HFBackbone
    from laya_eval.models.heads import make_head
    from laya_eval.models.layered import LayeredModel, ModelInfo

    folder = _tiny_bert(tmp_path / "bert")
    backbone = HFBackbone(str(folder))
    info = ModelInfo(num_classes=2, class_names=("n", "p"), input_shape=None, dataset=None)
    save_checkpoint(LayeredModel(backbone, make_head("concat", backbone.layer_dims, 2), info), tmp_path / "c.pt")
    load_checkpoint(tmp_path / "c.pt")
    _swap(folder)
    with pytest.raises(CheckpointError, match="config or tokenizer files .*tokenizer.json"):
        load_checkpoint(tmp_path / "c.pt")


# ------------------------------------------------------------------ checkpoints without probe or hashes
def _mlp_checkpoint(path):
    from laya_eval.loading.checkpoints import save_checkpoint
    from laya_eval.models.backbones import make_backbone
    from laya_eval.models.heads import make_head
    from laya_eval.models.layered import LayeredModel, ModelInfo

    torch.manual_seed(0)
    backbone = make_backbone("mlp", in_features=6, widths=[5, 4])
    info = ModelInfo(num_classes=3, class_names=("a", "b", "c"), input_shape=(6,), dataset=None)
    return save_checkpoint(LayeredModel(backbone, make_head("concat", backbone.layer_dims, 3), info), path)


@pytest.mark.parametrize("drop", ["probe", "checksum"])
def test_a_checkpoint_without_probe_or_checksum_is_refused_unless_allowed(tmp_path, drop):
    from laya_eval.loading.checkpoints import load_checkpoint

    path = _mlp_checkpoint(tmp_path / "c.pt")
    payload = torch.load(path, weights_only=True)
    payload[drop] = None if drop == "probe" else payload.pop(drop) and None
    payload = {k: v for k, v in payload.items() if v is not None or k == "probe"}
    if "checksum" in payload:  # a file written without a probe, its checksum made of what it holds
        from laya_eval.loading.schema import metadata_sha256

        payload["checksum"]["metadata"] = metadata_sha256(payload)
    torch.save(payload, tmp_path / "edited.pt")
    with pytest.raises(CheckpointError, match=f"lacks {drop}.*--allow-unverified"):
        load_checkpoint(tmp_path / "edited.pt")
    model = load_checkpoint(tmp_path / "edited.pt", allow_unverified=True)
    torch.testing.assert_close(model(torch.ones(2, 6)), load_checkpoint(path)(torch.ones(2, 6)))


def test_a_safetensors_header_with_too_many_entries_is_refused_before_it_is_parsed(tmp_path, monkeypatch):
    import laya_eval.loading.checkpoints as ckpt

    n = ckpt.MAX_CHECKPOINT_TENSORS + 1
    header = {f"t{i}": {"dtype": "U8", "shape": [1], "data_offsets": [i, i + 1]} for i in range(n)}
    raw = json.dumps(header).encode()
    (tmp_path / "many.safetensors").write_bytes(len(raw).to_bytes(8, "little") + raw + bytes(n))
    parsed = []
    monkeypatch.setattr(ckpt.json, "loads", lambda *a, **k: parsed.append(1))
    with pytest.raises(CheckpointError, match=f"lists {n} tensors; .* at most {ckpt.MAX_CHECKPOINT_TENSORS}"):
        ckpt.read_checkpoint(tmp_path / "many.safetensors")
    assert not parsed


def test_a_refused_safetensors_header_is_refused_before_the_file_is_read_whole(tmp_path):
    import tracemalloc

    import laya_eval.loading.checkpoints as ckpt

    n = ckpt.MAX_CHECKPOINT_TENSORS + 1
    header = {f"t{i}": {"dtype": "U8", "shape": [1], "data_offsets": [i, i + 1]} for i in range(n)}
    raw = json.dumps(header).encode()
    path = tmp_path / "many.safetensors"
    path.write_bytes(len(raw).to_bytes(8, "little") + raw)
    tail = 256 << 20
    with open(path, "r+b") as fh:  # a sparse tail: the file claims 256 MiB of tensor bytes after its header
        fh.truncate(8 + len(raw) + tail)
    tracemalloc.start()
    try:
        with pytest.raises(CheckpointError, match=f"lists {n} tensors"):
            ckpt.read_checkpoint(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * len(raw) < tail // 4, (peak, len(raw))


# ------------------------------------------------------------------ cache entries verified on read
def _encode(x):
    w = torch.linspace(-1, 1, 6 * 3).reshape(6, 3)
    return [x @ w, torch.tanh(x @ w)]


def _entry(tmp_path, data):
    key = feature_key({"name": "toy-encoder"}, data)
    feats = extract_features(_encode, data, key, cache_dir=tmp_path / "cache", batch_size=7)
    return feats.path, key


def _read_again(tmp_path, data, key):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        feats = extract_features(_encode, data, key, cache_dir=tmp_path / "cache", batch_size=7)
    return feats, [w for w in caught if issubclass(w.category, RecomputedWarning)]


def _flip(path):
    raw = bytearray(path.read_bytes())
    raw[-3] ^= 0x10
    path.write_bytes(bytes(raw))


def _rewrite(path, array, meta_name=None):
    """Replace an array file consistently (meta.json updated too): only shape/dtype checks can catch it."""
    from laya_eval.output.files import file_sha256

    np.save(path, array)
    meta = json.loads((path.parent / "meta.json").read_text())
    meta["arrays"][path.name].update(sha256=file_sha256(path))
    (path.parent / "meta.json").write_text(json.dumps(meta))


DAMAGE = {
    "flipped byte": lambda f: _flip(f / "layer1.npy"),
    "truncated": lambda f: (f / "layer0.npy").write_bytes((f / "layer0.npy").read_bytes()[:-20]),
    "rolled labels": lambda f: np.save(f / "y.npy", np.roll(np.load(f / "y.npy"), 1)),
    "float64 layer": lambda f: _rewrite(f / "layer1.npy", np.load(f / "layer1.npy").astype(np.float64)),
    "shorter layer": lambda f: _rewrite(f / "layer1.npy", np.load(f / "layer1.npy")[:-1]),
    "fifo layer": lambda f: ((f / "layer0.npy").unlink(), os.mkfifo(f / "layer0.npy")),
    "fifo meta": lambda f: ((f / "meta.json").unlink(), os.mkfifo(f / "meta.json")),
    "symlinked layer": lambda f: ((f / "layer0.npy").unlink(), (f / "layer0.npy").symlink_to(f / "layer1.npy")),
    "folder for a layer": lambda f: ((f / "layer1.npy").unlink(), (f / "layer1.npy").mkdir()),
    "meta not json": lambda f: (f / "meta.json").write_text("{"),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_cache_entry_is_recomputed_with_one_warning(tmp_path, damage):
    from tests.fuzzing import time_limit

    data = _data(n=23)
    folder, key = _entry(tmp_path, data)
    DAMAGE[damage](folder)
    with time_limit(20):
        feats, caught = _read_again(tmp_path, data, key)
    assert len(caught) == 1 and "not trusted" in str(caught[0].message)
    assert not feats.reused
    for got, want in zip(feats.hidden, _encode(data.x)):  # the oracle: a direct encoding
        torch.testing.assert_close(got, want)
    assert torch.equal(feats.y, data.y)
    again, caught = _read_again(tmp_path, data, key)  # the rebuilt entry is trusted again
    assert again.reused and not caught


def test_an_intact_entry_is_reused_and_edited_data_misses(tmp_path):
    data = _data(n=23)
    folder, key = _entry(tmp_path, data)
    feats, caught = _read_again(tmp_path, data, key)
    assert feats.reused and not caught
    edited = Dataset(x=data.x.clone(), y=data.y, class_names=data.class_names, name=data.name, split=data.split)
    edited.x[3, 2] += 1.0  # same name, split and size; other content
    assert feature_key({"name": "toy-encoder"}, edited) != key


# ------------------------------------------------------------------ resume by content
def _records(start, stop, layers=3):
    from laya_eval.engine.records import Records

    rows = np.arange(start, stop)
    return Records(
        sample=rows.astype(np.int64),
        label=rows % 2,
        pred=(rows + 1) % 2,
        confidence=rows / 100.0,
        scores={"laya": np.outer(rows, np.arange(layers)) / 7.0},
        effects={"gate": np.outer(rows, np.ones(layers)) / 3.0},
    )


CHUNK_DAMAGE = {
    "flipped byte": lambda p: _flip(p),
    "truncated": lambda p: p.write_bytes(p.read_bytes()[:200]),
    "not a zip": lambda p: p.write_bytes(b"PK\x03\x04garbage"),
    "fifo": lambda p: (p.unlink(), os.mkfifo(p)),
    "folder": lambda p: (p.unlink(), p.mkdir()),
    "symlink": lambda p: (p.unlink(), p.symlink_to(p.with_name("elsewhere.npz"))),
}


@pytest.mark.parametrize("damage", sorted(CHUNK_DAMAGE))
def test_a_damaged_chunk_is_not_used_and_warned_about(tmp_path, damage):
    from laya_eval.engine.partial import PartialStore
    from tests.fuzzing import time_limit

    PartialStore(tmp_path, "k", resume=False, n_layers=3).save_chunk(0, 10, _records(0, 10))
    path = next((tmp_path / ".partial").glob("chunk-*.npz"))
    CHUNK_DAMAGE[damage](path)
    with time_limit(20), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        store = PartialStore(tmp_path, "k", resume=True, n_layers=3)
        assert store.load_chunk(0, 10) is None
        store.save_chunk(0, 10, _records(0, 10))  # a damaged file is replaced, whatever it was
        back = store.load_chunk(0, 10)
    assert len([w for w in caught if issubclass(w.category, RecomputedWarning)]) == 1
    np.testing.assert_array_equal(back.scores["laya"], _records(0, 10).scores["laya"])


@pytest.mark.parametrize("foreign", ["3 of 10 rows", "rows of another range", "wrong layers", "int scores"])
def test_a_foreign_chunk_with_the_right_key_is_recomputed(tmp_path, foreign):
    from laya_eval.engine.partial import PartialStore

    made = {
        "3 of 10 rows": _records(0, 3),
        "rows of another range": _records(10, 20),
        "wrong layers": _records(0, 10, layers=4),
        "int scores": _records(0, 10),
    }[foreign]
    if foreign == "int scores":
        made.scores["laya"] = made.scores["laya"].astype(np.int64)
    PartialStore(tmp_path, "k", resume=False, n_layers=3).save_chunk(0, 10, made)
    with pytest.warns(RecomputedWarning, match="not used"):
        assert PartialStore(tmp_path, "k", resume=True, n_layers=3).load_chunk(0, 10) is None


def test_an_intact_chunk_round_trips(tmp_path):
    from laya_eval.engine.partial import PartialStore

    PartialStore(tmp_path, "k", resume=False, n_layers=3).save_chunk(0, 10, _records(0, 10))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        back = PartialStore(tmp_path, "k", resume=True, n_layers=3).load_chunk(0, 10)
    for name, value in _records(0, 10).to_arrays().items():
        np.testing.assert_array_equal(back.to_arrays()[name], value)


def _npz_data(path, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(200, 6)).astype(np.float32)  # the test split: 20%, 40 rows
    np.savez(path, x=x, y=(x[:, 0] > 0).astype(np.int64) + (x[:, 1] > 0))
    return f"npz:{path}"


def _killed_after(out, ckpt, data, options, n_chunks):
    from laya_eval.engine import partial
    from laya_eval.engine.evaluation import evaluate

    real, saved = partial.PartialStore.save_chunk, []

    def save_then_stop(self, start, stop, records):
        real(self, start, stop, records)
        saved.append(start)
        if len(saved) == n_chunks:
            raise KeyboardInterrupt

    partial.PartialStore.save_chunk = save_then_stop
    try:
        with pytest.raises(KeyboardInterrupt):
            evaluate(ckpt, data, options=dataclasses.replace(options, ablation=("gate",)), out=out)
    finally:
        partial.PartialStore.save_chunk = real


def test_resume_by_content(tmp_path):
    from laya_eval.engine.evaluation import evaluate
    from laya_eval.engine.plan import EvalOptions

    ckpt = _mlp_checkpoint(tmp_path / "m.pt")
    data = _npz_data(tmp_path / "d.npz")
    options = EvalOptions(methods=("contribution", "random"), limit=40, chunk_size=10, bootstrap=20)
    evaluate(ckpt, data, options=dataclasses.replace(options, ablation=("gate",)), out=tmp_path / "fresh")
    fresh = (tmp_path / "fresh" / "layers.csv").read_bytes()
    # damaged chunks are recomputed: the resumed result is the fresh one, byte for byte
    _killed_after(tmp_path / "r", ckpt, data, options, 3)
    chunks = sorted((tmp_path / "r" / ".partial").glob("chunk-*.npz"))
    _flip(chunks[0])
    chunks[1].write_bytes(chunks[1].read_bytes()[:100])
    with pytest.warns(RecomputedWarning):
        evaluate(ckpt, data, options=dataclasses.replace(options, ablation=("gate",)), out=tmp_path / "r", resume=True)
    assert (tmp_path / "r" / "layers.csv").read_bytes() == fresh
    # the data rewritten in place (same name, same shapes): its partial results are refused
    _killed_after(tmp_path / "s", ckpt, data, options, 2)
    _npz_data(tmp_path / "d.npz", seed=1)
    with pytest.raises(ConfigError, match="other data"):
        evaluate(ckpt, data, options=dataclasses.replace(options, ablation=("gate",)), out=tmp_path / "s", resume=True)
    # resuming onto a finished result of other options is refused; the result stays
    _npz_data(tmp_path / "d.npz", seed=0)
    other = EvalOptions(methods=("contribution",), limit=40, chunk_size=10, bootstrap=20)
    with pytest.raises(ConfigError, match="finished result made with other options"):
        evaluate(
            ckpt, data, options=dataclasses.replace(other, ablation=("gate",)), out=tmp_path / "fresh", resume=True
        )
    assert (tmp_path / "fresh" / "layers.csv").read_bytes() == fresh


def test_resume_onto_another_result_is_one_line_and_exit_2(tmp_path):
    from click.testing import CliRunner

    from laya_eval_cli.main import cli

    ckpt, data = _mlp_checkpoint(tmp_path / "m.pt"), _npz_data(tmp_path / "d.npz")
    base = [
        "faithfulness",
        str(ckpt),
        "--data",
        data,
        "--limit",
        "20",
        "--bootstrap",
        "20",
        "--quiet",
        "--out",
        str(tmp_path / "out"),
    ]
    assert CliRunner().invoke(cli, base + ["--methods", "contribution,random"]).exit_code == 0
    result = CliRunner().invoke(cli, base + ["--methods", "contribution", "--resume"])
    assert result.exit_code == 2
    assert result.output.strip().count("\n") == 0 and "finished result made with other options" in result.output


def test_a_hand_built_module_backbone_records_its_code_when_saved(tmp_path):
    from laya_eval.loading.checkpoints import load_checkpoint, read_checkpoint, save_checkpoint
    from laya_eval.loading.references import call_factory
    from laya_eval.models.backbones import ModuleBackbone
    from laya_eval.models.heads import make_head
    from laya_eval.models.layered import LayeredModel, ModelInfo
    from laya_eval.output.files import file_sha256

    path = tmp_path / "net.py"
    path.write_text(NET.format(act="ReLU"))
    backbone = ModuleBackbone(
        call_factory(f"{path}:make"), ["1", "3"], layer_dims=[5, 4], pool="avg", spec=f"py:{path}:make"
    )
    info = ModelInfo(num_classes=3, class_names=("a", "b", "c"), input_shape=(6,), dataset=None)
    save_checkpoint(LayeredModel(backbone, make_head("concat", [5, 4], 3), info), tmp_path / "c.pt")
    recorded = read_checkpoint(tmp_path / "c.pt")["config"]["backbone"]["kwargs"]["source_sha256"]
    assert recorded == {"module": file_sha256(path), "callable": file_sha256(path)}
    assert load_checkpoint(tmp_path / "c.pt", trust_code=True).n_layers == 2


def test_an_entry_written_by_another_process_meanwhile_is_read_not_a_traceback(tmp_path, monkeypatch):
    # Two runs filling the same entry at once: the second to finish finds the first one's folder in place.
    import os

    data = _data()
    key = feature_key({"name": "toy-encoder"}, data)
    cache = tmp_path / "cache"
    calls = []

    def encode_while_another_writes(x):
        if not calls:
            calls.append(1)
            with monkeypatch.context() as other:  # the other process: its own pid, so its own temporary folder
                other.setattr(os, "getpid", lambda: 1)
                extract_features(_encode, data, key, cache_dir=cache, batch_size=7)
        return _encode(x)

    feats = extract_features(encode_while_another_writes, data, key, cache_dir=cache, batch_size=7)
    assert feats.reused is False
    for got, want in zip(feats.hidden, _encode(data.x)):
        torch.testing.assert_close(got, want)
    assert sorted(p.name for p in cache.iterdir()) == [feats.path.name]  # no temporary folder left
