"""``laya-eval train``: train a built-in backbone + head and write a checkpoint."""

from __future__ import annotations

import click


from laya_eval_cli.options import declared, epoch_bar, head_kwargs, parse_key_values

# Options of a backbone + head that a depth-mixer classifier (built-in classifier, trained whole) has not.
_HEAD_ONLY = ("head", "d_star", "tau", "scorer_hidden", "psi", "freeze_backbone", "init_ckpt")


def _train_mixer_model(kind, dataset, out, options, backbone_arg, data_dir, download, quiet, limit):
    """``--backbone denseformer|attnres``: train the depth-mixer classifier and write a mixer model file."""
    from laya_eval.errors import ConfigError
    from laya_eval.mixers.reference import save_mixer_model
    from laya_eval.mixers.training import train_mixer_model

    ctx = click.get_current_context()
    given = [name for name in _HEAD_ONLY if ctx.get_parameter_source(name) != click.core.ParameterSource.DEFAULT]
    if given:
        flag = "--" + given[0].replace("_ckpt", "").replace("_", "-")
        raise ConfigError(
            f"{flag} does not apply to --backbone {kind}: its classifier is built in and trained with the backbone."
        )
    if not str(out).endswith(".pt"):
        raise ConfigError(f"--out: a depth-mixer model is written as a .pt file; got {str(out)!r}.")
    bar, on_epoch = epoch_bar(quiet, options.epochs, f"train {kind}")
    with bar:
        fit = train_mixer_model(
            kind,
            dataset,
            config=parse_key_values(backbone_arg, "--backbone-arg"),
            options=options,
            data_dir=data_dir,
            download=download,
            on_epoch=on_epoch,
            limit=limit,
        )
    save_mixer_model(fit.model, out, info=fit.info)
    click.echo(f"{dataset} {kind} seed {options.seed}: {_scores(fit.metrics, fit.training)} -> {out}")


def _scores(m, tr) -> str:
    """The test scores, the rows they were measured on and the training rows (the split is disjoint)."""
    return (
        f"test accuracy {m['test_accuracy']:.4f}, macro-F1 {m['test_macro_f1']:.4f} on {m['n_test']} held-out "
        f"rows (train {m['n_train']}, val {m['n_val']}; epochs {tr.epochs_run}, best {tr.best_epoch}, "
        f"{tr.wall_time_s:.1f} s)"
    )


@click.command()
@declared("train")
def train(
    dataset,
    backbone,
    head,
    out,
    d_star,
    tau,
    scorer_hidden,
    psi,
    backbone_arg,
    init_ckpt,
    limit,
    allow_unverified,
    data_dir,
    download,
    quiet,
    **params,
):
    """Train a model with the paper's reference protocol and write a checkpoint.

    Adam, early stopping on validation accuracy (the last 10% of the training
    set), best weights restored; test accuracy and macro-F1 on the held-out test
    split are printed and stored with the size of each split (docs/data.md).

    Example: laya-eval train --dataset fashion-mnist --backbone mlp --head laya --seed 1337 --out ckpt.pt
    """
    from laya_eval.catalog import MIXER_MODEL_KINDS
    from laya_eval.loading.checkpoints import check_checkpoint_path, save_checkpoint
    from laya_eval.options import values_for
    from laya_eval.training.head_fit import train as train_model
    from laya_eval.training.trainer import TrainOptions, resolve_device

    check_checkpoint_path(out)  # before the training, not after it
    options = TrainOptions(**values_for("TrainOptions", params))
    resolve_device(options.device)
    if backbone in MIXER_MODEL_KINDS:
        return _train_mixer_model(backbone, dataset, out, options, backbone_arg, data_dir, download, quiet, limit)
    bar, on_epoch = epoch_bar(quiet, options.epochs, f"train {head}")
    with bar:
        result = train_model(
            backbone,
            head,
            dataset,
            backbone_kwargs=parse_key_values(backbone_arg, "--backbone-arg"),
            head_kwargs=head_kwargs(head, d_star, tau, scorer_hidden, psi),
            options=options,
            init=init_ckpt,
            data_dir=data_dir,
            download=download,
            on_epoch=on_epoch,
            allow_unverified=allow_unverified,
            limit=limit,
        )
    save_checkpoint(result.model, out)
    click.echo(f"{dataset} {backbone}+{head} seed {options.seed}: {_scores(result.metrics, result.training)} -> {out}")
