"""``laya-eval import-keras``: a Keras 3 LAYA model of the reference architecture as a laya-eval checkpoint."""

from __future__ import annotations

import click

from laya_eval_cli.options import declared


@click.command("import-keras")
@click.argument("keras_file", metavar="MODEL.keras", type=click.Path(dir_okay=False))
@declared("import-keras")
def import_keras(keras_file, out, tau, input_shape):
    """Read a Keras 3 LAYA model (.keras or .weights.h5) as data and write a laya-eval checkpoint.

    The reference architecture: Dense -> LayerNormalization -> GELU blocks, one Dense adapter per block, a
    scorer Dense(gelu) -> Dense(L), softmax(scores / tau) and a Dense classifier. No Keras or TensorFlow is
    imported and nothing in the file runs. See docs/commands/import-keras.md.

    Example: laya-eval import-keras laya.keras --input-shape 1,28,28 --out laya.pt
    """
    from laya_eval.loading.checkpoints import check_checkpoint_path, save_checkpoint
    from laya_eval.loading.keras_import import import_keras as read_model

    check_checkpoint_path(out)
    model = read_model(keras_file, tau=tau, input_shape=input_shape)
    save_checkpoint(model, out)
    imported, head = model.info.training["imported_from"], model.head
    widths = ", ".join(map(str, model.backbone.layer_dims))
    click.echo(
        f"{imported['file']} ({imported['format']}, Keras {imported['keras_version']}): mlp [{widths}] + laya "
        f"(d* {head.d_star}, scorer {head.scorer_hidden}, {head.num_classes} classes), tau {head.tau:g} "
        f"({imported['tau_from']}), LayerNorm eps {model.backbone.layer_norm_eps:g} "
        f"({imported['layer_norm_eps_from']}) -> {out}"
    )
