"""Training: early stopping restores the best epoch, seeds give the same bytes, frozen backbones stay frozen."""

from __future__ import annotations

import pytest
import torch

from laya_eval.loading.checkpoints import load_checkpoint, save_checkpoint
from laya_eval.errors import ConfigError, DataError
from laya_eval.training.trainer import TrainOptions, build_model, classification_metrics, predict, train_in_place


def _small(digits, head="laya", seed=0):
    return build_model(
        "mlp",
        head,
        digits["train"],
        backbone_kwargs={"widths": [32, 16]},
        head_kwargs={"d_star": 8} if head in ("laya", "scalarmix") else {},
        seed=seed,
    )


def test_learns_and_restores_the_best_epoch(digits):
    model = _small(digits)
    result = train_in_place(
        model, digits["train"], digits["val"], TrainOptions(epochs=6, seed=0, batch_size=64, lr=3e-3)
    )
    best = max(h["val_accuracy"] for h in result.history)
    assert result.best_val_accuracy == best
    assert result.history[result.best_epoch - 1]["val_accuracy"] == best
    # the restored weights reproduce the best validation accuracy, computed here with plain tensors
    val_acc = (predict(model, digits["val"]) == digits["val"].y).float().mean().item()
    assert val_acc == pytest.approx(best)
    assert best > 0.5  # ten classes: chance is 0.1


def test_early_stopping_patience(digits):
    model = _small(digits)
    result = train_in_place(model, digits["train"], digits["val"], TrainOptions(epochs=40, patience=1, seed=0, lr=0.05))
    assert result.epochs_run < 40
    assert result.epochs_run - result.best_epoch == 1


def test_same_seed_same_checkpoint_bytes(digits, tmp_path):
    paths = []
    for k in range(2):
        model = _small(digits, seed=3)
        train_in_place(model, digits["train"], digits["val"], TrainOptions(epochs=2, seed=3))
        paths.append(save_checkpoint(model, tmp_path / f"{k}.pt"))
    assert paths[0].read_bytes() == paths[1].read_bytes()


def test_freeze_backbone_trains_only_the_head(digits, digits_checkpoints):
    source = load_checkpoint(digits_checkpoints["concat"])
    model = build_model(
        "mlp", "laya", digits["train"], backbone_kwargs={"widths": [64, 32, 16]}, head_kwargs={"d_star": 8}, seed=0
    )
    model.backbone = source.backbone
    before = {k: v.clone() for k, v in model.backbone.state_dict().items()}
    head_before = [p.clone() for p in model.head.parameters()]
    train_in_place(model, digits["train"], digits["val"], TrainOptions(epochs=2, seed=0, freeze_backbone=True))
    for k, v in model.backbone.state_dict().items():
        assert torch.equal(v, before[k]), k
    assert any(not torch.equal(a, b) for a, b in zip(head_before, model.head.parameters()))


def test_classification_metrics_by_hand():
    y = torch.tensor([0, 0, 1, 1])
    p = torch.tensor([0, 1, 1, 1])
    m = classification_metrics(y, p)
    # accuracy 3/4; F1 class 0: P=1, R=1/2 -> 2/3; class 1: P=2/3, R=1 -> 4/5; macro = (2/3 + 4/5) / 2
    assert m["accuracy"] == pytest.approx(0.75)
    assert m["macro_f1"] == pytest.approx((2 / 3 + 4 / 5) / 2)


def test_diverging_training_stops_with_an_error(digits):
    from laya_eval.errors import TrainingError

    model = build_model("mlp", "concat", digits["train"], backbone_kwargs={"widths": [8]}, seed=0)
    with pytest.raises(TrainingError, match=r"training diverged: the loss is nan at epoch 1 \(lr=1e\+30\)"):
        train_in_place(model, digits["train"], digits["val"], TrainOptions(epochs=3, lr=1e30, seed=0))


def test_bad_options_and_data(digits):
    with pytest.raises(ConfigError, match="epochs must be a positive integer; got 0"):
        TrainOptions(epochs=0)
    with pytest.raises(ConfigError, match="lr must be a finite number > 0; got 0"):
        TrainOptions(lr=0)
    with pytest.raises(ConfigError, match="lr must be a finite number > 0; got inf"):
        TrainOptions(lr=float("inf"))
    with pytest.raises(DataError, match="the cnn backbone needs image inputs"):
        build_model("cnn", "laya", digits["train"])
    with pytest.raises(ConfigError, match="backbone must be one of"):
        build_model("resnet", "laya", digits["train"])


def _reference_loop(module, params, batch_logits, val_logits, y_train, y_val, options):
    """The reference protocol written out plainly: one gather per batch, PyTorch's per-tensor Adam
    (``foreach=False``), best validation epoch restored. The trainer must give the same bits."""
    import copy

    gen = torch.Generator().manual_seed(options.seed)
    optimizer = torch.optim.Adam(params, lr=options.lr, foreach=False)
    best, best_epoch, best_state = -1.0, 0, None
    for epoch in range(1, options.epochs + 1):
        module.train()
        order = torch.randperm(len(y_train), generator=gen)
        for start in range(0, len(order), options.batch_size):
            idx = order[start : start + options.batch_size]
            loss = torch.nn.functional.cross_entropy(batch_logits(idx), y_train[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        module.eval()
        with torch.no_grad():
            acc = float((val_logits().argmax(-1) == y_val).float().mean())
        if acc > best:
            best, best_epoch, best_state = acc, epoch, copy.deepcopy(module.state_dict())
        elif epoch - best_epoch >= options.patience:
            break
    module.load_state_dict(best_state)


def _same_weights(a: torch.nn.Module, b: torch.nn.Module) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert list(sa) == list(sb)
    for name in sa:
        assert torch.equal(sa[name], sb[name]), name


@pytest.mark.parametrize("head", ["laya", "scalarmix", "concat"])
def test_train_head_gives_the_bits_of_the_plain_reference_loop(digits, monkeypatch, head):
    import laya_eval.training.trainer as train_module
    from laya_eval.loading.feature_cache import Features
    from laya_eval.training.features import encode
    from laya_eval.training.trainer import fresh_head, train_head

    source = _small(digits, head)
    train_f, val_f = (Features(hidden=encode(source, digits[s]), y=digits[s].y) for s in ("train", "val"))
    options = TrainOptions(epochs=5, patience=2, seed=4, batch_size=48, lr=3e-3)
    # Chunks of 3 batches, and a training split (1,293 rows) that is a whole number of neither.
    monkeypatch.setattr(train_module, "_GATHER_BATCHES", 3)
    assert len(train_f.y) % options.batch_size and len(train_f.y) % (3 * options.batch_size)
    trained = fresh_head(source.head, source.head.layer_dims, 4)
    train_head(trained, train_f, val_f, options)

    reference = fresh_head(source.head, source.head.layer_dims, 4)
    torch.manual_seed(options.seed)
    _reference_loop(
        reference,
        list(reference.parameters()),
        lambda idx: reference([h[idx] for h in train_f.hidden]),
        lambda: reference(val_f.hidden),
        train_f.y,
        val_f.y,
        options,
    )
    _same_weights(trained, reference)


def test_gather_chunks_are_whole_batches_within_the_byte_bound():
    from laya_eval.training.trainer import _gather_rows

    small = [torch.zeros(10, 8), torch.zeros(10, 4)]  # 48 bytes a row
    assert _gather_rows(small, 128) == 32 * 128
    wide = [torch.zeros(2, 2**20)]  # 4 MiB a row: one batch of 128 rows is over the 64 MiB bound
    assert _gather_rows(wide, 128) == 128
    mid = [torch.zeros(2, 2**14)]  # 64 KiB a row: 64 MiB hold 1,024 rows = 8 batches of 128
    assert _gather_rows(mid, 128) == 8 * 128


def test_train_gives_the_bits_of_the_plain_reference_loop(digits):
    options = TrainOptions(epochs=4, patience=2, seed=2, batch_size=100, lr=3e-3)
    trained = _small(digits, seed=2)
    train_in_place(trained, digits["train"], digits["val"], options)

    reference = _small(digits, seed=2)
    torch.manual_seed(options.seed)
    x_train, x_val = digits["train"].x, digits["val"].x
    _reference_loop(
        reference,
        list(reference.parameters()),
        lambda idx: reference(x_train[idx]),
        lambda: reference(x_val),
        digits["train"].y,
        digits["val"].y,
        options,
    )
    _same_weights(trained, reference)


def test_train_on_an_npz_of_one_set_reports_held_out_accuracy(tmp_path):
    """300 digits in one npz: the printed test accuracy is that of the 60 held-out rows, below the training rows'."""
    import re

    import numpy as np
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    from laya_eval.loading.checkpoints import load_checkpoint
    from tests.cli_helpers import run

    bunch = load_digits()
    x, y = (bunch.data[:300] / 16).astype(np.float32), bunch.target[:300]
    np.savez(tmp_path / "d.npz", x=x, y=y)
    ckpt = tmp_path / "m.pt"
    result = run(
        *("train", "--dataset", f"npz:{tmp_path / 'd.npz'}", "--backbone", "mlp", "--head", "scalarmix"),
        *("--epochs", 30, "--patience", 30, "--seed", 0, "--out", ckpt, "-q"),
    )
    assert result.exit_code == 0, result.output
    # by hand: ceil(0.2 * 300) = 60 test rows; floor(240 / 10) = 24 val rows; 216 train rows
    assert "on 60 held-out rows (train 216, val 24;" in result.output
    printed = float(re.search(r"test accuracy (\d\.\d+)", result.output).group(1))
    # the oracle: scikit-learn's stratified split of the arrays, the saved model's predictions
    train_rows, test_rows = train_test_split(np.arange(300), test_size=0.2, stratify=y, random_state=0)
    model = load_checkpoint(ckpt)
    with torch.no_grad():
        pred = model(torch.from_numpy(x)).argmax(-1).numpy()
    test_acc, train_acc = (float((pred[r] == y[r]).mean()) for r in (test_rows, train_rows[:216]))
    assert printed == pytest.approx(test_acc, abs=5e-5)
    # held out, the rows score below the training rows (0.9667 against 0.9815 on this machine)
    assert test_acc < train_acc
    info = run("info", ckpt)
    assert re.search(r"metrics\.n_train +216\n", info.output) and re.search(r"metrics\.n_val +24\n", info.output)
    assert "stratified 20%" in re.search(r"preprocessing +(.*)\n", info.output).group(1)
