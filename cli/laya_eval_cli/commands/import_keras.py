"""``laya-eval import-keras``: a Keras 3 LAYA model of the reference architecture as a laya-eval checkpoint."""

from __future__ import annotations

import click


def _shape(ctx, param, value):
    if value is None:
        return None
    try:
        sizes = tuple(int(part) for part in value.split(","))
    except ValueError:
        raise click.BadParameter(f"expected sizes separated by commas, e.g. 1,28,28; got {value!r}.") from None
    if not sizes or min(sizes) < 1:
        raise click.BadParameter(f"expected positive sizes, e.g. 1,28,28; got {value!r}.")
    return sizes


@click.command("import-keras")
@click.argument("keras_file", metavar="MODEL.keras", type=click.Path(dir_okay=False))
@click.option("--out", required=True, type=click.Path(dir_okay=False),
              help="Checkpoint to write (.pt or .safetensors).")
@click.option("--tau", type=click.FloatRange(min=0, min_open=True), default=None,
              help="The head's temperature when the file stores none (the reference code keeps it in Python). "
                   "[default: the file's, else 1.5]")
@click.option("--input-shape", callback=_shape, default=None, metavar="SIZES",
              help="Per-sample input shape to evaluate on, e.g. 1,28,28 for laya-eval's Fashion-MNIST (its product "
                   "is the first Dense layer's input size). [default: the Keras Input's shape]")
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
    click.echo(f"{imported['file']} ({imported['format']}, Keras {imported['keras_version']}): mlp [{widths}] + laya "
               f"(d* {head.d_star}, scorer {head.scorer_hidden}, {head.num_classes} classes), tau {head.tau:g} "
               f"({imported['tau_from']}), LayerNorm eps {model.backbone.layer_norm_eps:g} "
               f"({imported['layer_norm_eps_from']}) -> {out}")
