"""The names, descriptions and needs of every registered method, ablation and scope.

This module is the one owner of those facts and imports nothing heavy (no torch), so
the CLI's ``--help`` and choices, the figures and the report read it without paying
for torch. The implementations bind functions to these entries through the public registration
(:func:`laya_eval.register_method`, :func:`laya_eval.register_ablation`), which also enters a plug-in's
entry here (:func:`add_method_spec`, :func:`add_ablation_spec`); every entry then has a function and
every function an entry (checked at import of :mod:`laya_eval.engine.methods` and
:mod:`laya_eval.engine.removals`).

What an entry *needs* is how the engine (``laya_eval/engine/evaluation.py``) knows what to
provide without naming any method or ablation:

``"gradients"``
    d logit_c / d h_i for the batch (computed once per batch, shared by every method
    that needs it).
``"tensor_inputs"``
    At network scope the raw inputs must be a tensor (not text); for an ablation this is checked while planning.
``"donors"``
    The states of other samples of the evaluated split (an ablation's replacement values), drawn per
    sample from (seed, sample index, draw) and run through the model by the engine.
``"draws"``
    A random replacement: the effect is averaged over ``draws`` seeded draws per sample.
    At network scope the raw inputs must be a tensor (not text).
``"baseline"``
    The scores start from a baseline state (``MethodContext.layer_baseline``: zeros, the dataset mean or
    the state the ablation puts in, by ``--ig-baseline``); with the removed state they are computed per
    ablation.
``"updates"``
    At network scope the ablation acts on a block's *update* ``u_i = h_i - h_{i-1}`` (the block's output minus
    its input) instead of its output: its statistics and its donors' states are updates, and what it puts in is
    added back to the block's input. Every block must keep its shape, which is checked while planning.
``"network_gradients"``
    Gradients through the backbone at network scope (the method takes its own): the inputs must be tensors, or
    texts the backbone tokenizes into tensors (checked while planning).
``"probability_gradients"``
    d p_c / d h_i (``p_c`` the softmax probability of the explained class), from the same one backward pass as
    ``"gradients"``.
``"removal"``
    The scores estimate an ablation's effect: the method runs once per ablation of the run
    (``MethodContext.ablation`` and its replacement values ``MethodContext.removal_fill``), and every ablation of
    the run must put a state in place of the layer (checked while planning).
``"stat:<name>"``
    A dataset statistic from :data:`laya_eval.engine.dataset_stats.STATISTICS`, computed in a
    pass over the whole evaluated set (all processes together) before the main pass.

May import: errors, checks.
"""

from __future__ import annotations

from dataclasses import dataclass

from laya_eval.checks import check_choice, fail

__all__ = [
    "ABLATIONS",
    "ABLATION_DRAWS",
    "ABLATION_SPECS",
    "ANGULAR_SPAN",
    "BACKBONE_NAMES",
    "BOOTSTRAP_RESAMPLES",
    "BUILTIN_ABLATIONS",
    "BUILTIN_METHODS",
    "CHUNK_SIZE",
    "DISTANCE_SPECS",
    "D_STAR",
    "EVAL_BATCH_SIZE",
    "HEAD_NAMES",
    "IG_BASELINES",
    "IG_STEPS",
    "LAYA_TAU",
    "LAYER_ROAR_COLUMNS",
    "MAX_MEMORY_MB",
    "META_SEEDS",
    "METHOD_SPECS",
    "NEXT_TOKEN_METHODS",
    "MIN_BOOTSTRAP_RESAMPLES",
    "MIN_INTERVAL_SAMPLES",
    "MIXER_METHODS",
    "MIXER_MODEL_KINDS",
    "MIXER_REMOVALS",
    "PLANTED_FAMILY_SPECS",
    "PLANTED_REFERENCES",
    "PRUNE_RANDOM_REFITS",
    "PRUNE_RANDOM_RANKINGS",
    "PRUNE_SEEDS",
    "RANDOMISATION_COLUMNS",
    "RETRAIN_PATIENCE",
    "ROAR_AGREEMENT_COLUMNS",
    "ROAR_SEEDS",
    "SANITY_FILES",
    "SCOPES",
    "SCORER_HIDDEN",
    "TIE_RTOL",
    "TRAIN_BATCH_SIZE",
    "TRAIN_EPOCHS",
    "TRAIN_LR",
    "TRAIN_PATIENCE",
    "TRAIN_SEED",
    "AblationSpec",
    "DistanceSpec",
    "MethodSpec",
    "SPLITS",
    "DTYPES",
    "TABLE_FORMATS",
    "FIGURE_FORMATS",
    "FIGURE_STYLES",
    "PSI_CHOICES",
    "POOLS",
    "HF_POOLS",
    "MODULE_POOLS",
    "SIMILARITIES",
    "DEFAULT_ABLATION",
    "PlantedFamilySpec",
    "ablation_names",
    "add_ablation_spec",
    "add_method_spec",
    "distance_names",
    "fixed_ablation_names",
    "in_registry_order",
    "method_names",
    "planted_family_names",
]

SCOPES = ("head", "network")

# Protocol defaults: the library's option classes and the CLI's options read these, so there is one copy.
#: The reference training protocol (Adam, early stopping on validation accuracy).
TRAIN_EPOCHS, TRAIN_BATCH_SIZE, TRAIN_LR, TRAIN_PATIENCE, TRAIN_SEED = 50, 128, 3e-4, 5, 1337
#: Early-stopping patience of the heads ``sanity`` retrains on cached features; resamples of every 95% interval.
RETRAIN_PATIENCE, BOOTSTRAP_RESAMPLES = 2, 1000
#: Fewest resamples a 95% percentile interval is reported from: its 2.5% and 97.5% quantiles then rest on at
#: least 2.5 resamples each; below it the interval columns stay empty and tables say "n/a".
MIN_BOOTSTRAP_RESAMPLES = 100
#: Fewest defined samples a 95% bootstrap interval is reported from. A percentile interval over n samples can take
#: at most C(2n-1, n) distinct resampled means: 3 for n = 2, 10 for n = 3, 35 for n = 4, 126 for n = 5. Below 5 its
#: 2.5% and 97.5% quantiles are a few of those values (two samples give [min, max] or a zero width), not the
#: spread of a mean; with 5 samples every resampled mean is still one of 126, so read such an interval as rough.
MIN_INTERVAL_SAMPLES = 5
#: The method ``--reference auto`` tests every other method against where a run has it (the exact per-layer term).
AUTO_REFERENCE = "contribution"
#: Samples per resumable chunk of an evaluation (results do not depend on it); effects of a sample closer than this
#: share of its largest effect are ranked as tied; samples per batch of an evaluation (and of sanity's, mixers').
CHUNK_SIZE, TIE_RTOL, EVAL_BATCH_SIZE = 1024, 1e-4, 256
#: Evaluation: Integrated Gradients steps, the network-scope memory budget (MiB), seeded draws per sample of the
#: random ablations (and of the mixer audit's resample), the angular-distance baseline's span in layers.
IG_STEPS, MAX_MEMORY_MB, ABLATION_DRAWS, ANGULAR_SPAN = 50, 2048, 8, 1
#: LAYA and ScalarMix heads: the shared space size d*; LAYA's softmax temperature and scorer width.
D_STAR, LAYA_TAU, SCORER_HIDDEN = 96, 1.5, 192
#: Repetitions: sanity's layer-ROAR seeds; prune's refit seeds, random rankings and refits; meta's seeds.
ROAR_SEEDS, PRUNE_SEEDS, PRUNE_RANDOM_RANKINGS, PRUNE_RANDOM_REFITS, META_SEEDS = 3, 3, 20, 3, 5

# What a `laya-eval sanity` folder holds (its writer and the report, which reads it without torch, share these).
SANITY_FILES = ("randomisation.csv", "data_randomisation.csv", "layer_roar.csv", "roar_agreement.csv", "sanity.json")
RANDOMISATION_COLUMNS = [
    "check",
    "step",
    "params",
    "method",
    "similarity",
    "similarity_ci_low",
    "similarity_ci_high",
    "similarity_ci_note",
    "faithfulness",
]
LAYER_ROAR_COLUMNS = ["layer", "seed", "accuracy", "accuracy_drop"]
ROAR_AGREEMENT_COLUMNS = ["method", "spearman", "ci_low", "ci_high", "ci_note"]


@dataclass(frozen=True)
class MethodSpec:
    """A layer attribution method as the user sees it.

    Attributes
    ----------
    name : str
    description : str
    requires : {"any", "weights", "laya", "adapted", "states"}
        ``weights``: the head has layer weights (LAYA, ScalarMix); ``laya``: a LAYA head; ``adapted``: a head
        with per-layer adapters and a linear classifier (LAYA, ScalarMix); ``states``: layer states of one
        width as the head sees them (adapted states, or pooled hidden states of equal widths).
    needs : tuple of str
        What the engine must provide (see the module docstring).
    baseline : bool
        A chance baseline, not an explanation (left out of "do all methods agree" checks).
    label, short_label : str
        How figures and reports name it (the short one for direct labels on lines).
    opt_in : bool
        Run only when asked for by name (``--methods``), not among the defaults.
    """

    name: str
    description: str
    requires: str = "any"
    needs: tuple[str, ...] = ()
    baseline: bool = False
    label: str = ""
    short_label: str = ""
    opt_in: bool = False


@dataclass(frozen=True)
class AblationSpec:
    """A way of removing a layer.

    Attributes
    ----------
    name : str
    description : str
    scopes : tuple of str
        The scopes it is defined for.
    needs : tuple of str
        Dataset statistics (``"stat:<name>"``) it needs before the effects; ``"draws"`` / ``"donors"`` for a
        replacement drawn per sample; ``"updates"`` when it replaces a block's update, not its output.
    """

    name: str
    description: str
    scopes: tuple[str, ...] = SCOPES
    needs: tuple[str, ...] = ()

    @property
    def drawn_per_sample(self) -> bool:
        """Whether its replacement is drawn per sample (``needs`` has ``"draws"`` or ``"donors"``): its fills then
        come from the sample fill it is registered with, not from one value for every sample."""
        return bool({"donors", "draws"} & set(self.needs))

    @property
    def draws_noise(self) -> bool:
        """Whether it is drawn per sample without donors (``noise``, ``noise-update``): its drawn states are
        what ``--save-draws`` writes (``noise_draws.npz``); a donor ablation's draws are ``donors.csv``."""
        return "draws" in self.needs and "donors" not in self.needs


METHOD_SPECS: dict[str, MethodSpec] = {
    m.name: m
    for m in (
        MethodSpec(
            "laya",
            "LAYA attention alpha(x) from the forward pass.",
            requires="laya",
            label="LAYA α(x)",
            short_label="α(x)",
        ),
        MethodSpec(
            "static",
            "Input-independent layer weights: softmax(w) for ScalarMix, the mean alpha over the evaluated set for LAYA.",
            requires="weights",
            needs=("stat:mean_layer_weights",),
            label="static weights",
            short_label="static",
        ),
        MethodSpec(
            "contribution",
            "Exact per-layer term of the predicted logit, t_{i,c}(x).",
            label="exact contribution",
            short_label="contrib.",
        ),
        MethodSpec(
            "ig",
            "Integrated Gradients (Captum; 50 Gauss-Legendre steps by default, --ig-steps), summed over each layer's "
            "dimensions, from a baseline (--ig-baseline): head scope from zero pooled states by default; network "
            "scope by default from the state the ablation puts in (zeros or the mean, injected inside the backbone; "
            "each ablation of a run its own) to the block's output.",
            needs=("network_gradients", "baseline"),
            label="Integrated Gradients",
            short_label="IG",
        ),
        MethodSpec(
            "gradcam",
            "Grad-CAM-style (Captum LayerGradCam semantics): ReLU of the gradient-weighted channel sum, "
            "averaged over space; on a vector layer ReLU(sum grad*act).",
            needs=("gradients",),
            label="Grad-CAM",
            short_label="Grad-CAM",
        ),
        MethodSpec(
            "grad_x_act",
            "Sum over dimensions of gradient x activation.",
            needs=("gradients",),
            label="gradient × activation",
            short_label="grad×act",
        ),
        MethodSpec(
            "random",
            "Seeded uniform scores drawn per sample from (seed, sample index): the chance baseline.",
            baseline=True,
            label="random",
            short_label="random",
        ),
        MethodSpec(
            "block_influence",
            "Block Influence (ShortGPT): 1 - cos(s_{i-1}, s_i) between consecutive layer states as the head sees "
            "them (pooled; through the adapters for LAYA and ScalarMix); layer 1 has no earlier state in the head's "
            "input and scores 1 (cos taken as 0).",
            requires="states",
            label="block influence",
            short_label="BI",
        ),
        MethodSpec(
            "angular_distance",
            "Angular distance (Gromov et al.): arccos(cos(s_{i-1}, s_{i+n-1})) / pi over the block of n layers "
            "starting at layer i (n = --angular-span, default 1; a block past the last layer ends there); layer 1 "
            "has no earlier state and scores 1/2 (cos taken as 0).",
            requires="states",
            label="angular distance",
            short_label="angular",
        ),
        MethodSpec(
            "alpha_norm",
            "Norm-weighted layer weight (Kobayashi et al. 2020): alpha_i(x) * ||W z_i|| for LAYA, gamma * s_i * "
            "||W z_i|| for ScalarMix (W the classifier weight, z_i the adapted state).",
            requires="adapted",
            label="α·‖W z‖",
            short_label="α‖Wz‖",
        ),
        MethodSpec(
            "atp",
            "Attribution patching: the first-order estimate of the run's ablation's effect on p_t, "
            "dp_t/dh_i . (h_i - new_i), new_i the state the ablation puts in (its expectation for a drawn one; "
            "h_{i-1} + the new update for skip and the update forms), from the run's one backward pass; scored "
            "against that ablation (the summary's ablation column). Only when asked for (--methods).",
            needs=("probability_gradients", "removal"),
            label="attribution patching",
            short_label="AtP",
            opt_in=True,
        ),
    )
}

ABLATION_SPECS: dict[str, AblationSpec] = {
    a.name: a
    for a in (
        AblationSpec("gate", "Drop the layer's term; everything else, alpha included, unchanged.", scopes=("head",)),
        AblationSpec(
            "gate-renorm", "Drop the layer's term and renormalise the remaining layer weights.", scopes=("head",)
        ),
        AblationSpec("zero", "Replace the layer's state with zeros and recompute everything after it."),
        AblationSpec(
            "mean",
            "Replace the layer's state with its mean over the evaluated data and recompute everything after it.",
            needs=("stat:hidden_mean",),
        ),
        AblationSpec(
            "resample",
            "Replace the layer's state (pooled at head scope, the block output at network scope) "
            "with that of another sample of the evaluated split, drawn per sample from (seed, "
            "sample index, draw); the effect is the mean over --draws donors.",
            needs=("donors", "draws", "tensor_inputs"),
        ),
        AblationSpec(
            "noise",
            "Replace the layer's state with Gaussian noise of the layer's own per-feature mean and "
            "standard deviation over the evaluated data, drawn per sample from (seed, sample index, "
            "draw); the effect is the mean over --draws draws.",
            needs=("stat:hidden_mean", "stat:hidden_square_mean", "draws", "tensor_inputs"),
        ),
        AblationSpec(
            "skip",
            "Remove the block's update: its output replaced by its input (h_i := h_{i-1}), every later block "
            "recomputed (network scope; blocks that keep their shape).",
            scopes=("network",),
            needs=("updates",),
        ),
        AblationSpec(
            "mean-update",
            "Replace the block's update h_i - h_{i-1} with its mean over the evaluated data, added to the block's "
            "input (network scope; blocks that keep their shape).",
            scopes=("network",),
            needs=("updates", "stat:update_mean"),
        ),
        AblationSpec(
            "resample-update",
            "Replace the block's update with that of another sample of the evaluated split (drawn as for "
            "resample), added to the block's input; the effect is the mean over --draws donors (network scope).",
            scopes=("network",),
            needs=("updates", "donors", "draws", "tensor_inputs"),
        ),
        AblationSpec(
            "noise-update",
            "Replace the block's update with Gaussian noise of the update's per-feature mean and standard "
            "deviation over the evaluated data, added to the block's input; the effect is the mean over --draws "
            "draws (network scope).",
            scopes=("network",),
            needs=("updates", "stat:update_mean", "stat:update_square_mean", "draws", "tensor_inputs"),
        ),
    )
}

ABLATIONS = tuple(ABLATION_SPECS)

#: The names laya-eval itself defines; a plug-in's names must differ from these.
BUILTIN_METHODS = frozenset(METHOD_SPECS)
BUILTIN_ABLATIONS = frozenset(ABLATION_SPECS)
#: What a method may require of the head (``MethodSpec.requires``) and the needs without a ``stat:`` prefix.
METHOD_REQUIREMENTS = ("any", "weights", "laya", "adapted", "states")
PLAIN_NEEDS = (
    "gradients",
    "network_gradients",
    "probability_gradients",
    "removal",
    "tensor_inputs",
    "baseline",
    "donors",
    "draws",
)
#: Integrated Gradients baselines (``--ig-baseline``); the default is zero at head scope, removed at network scope.
IG_BASELINES = ("zero", "mean", "removed")


def _check_entry(kind: str, spec, builtins: frozenset, registry: dict) -> bool:
    """Shared checks of a new entry; ``True`` when it is the catalog's own built-in entry (nothing to add)."""
    name = getattr(spec, "name", None)
    if not isinstance(name, str) or not name or not all(c.isalnum() or c in "_-" for c in name):
        raise ValueError(f"{kind} name must be letters, digits, '_' or '-'; got {name!r}.")
    if name in builtins:
        if registry.get(name) is spec:
            return True
        raise ValueError(f"{kind} {name!r} collides with the built-in {kind} of that name; choose another name.")
    if name in registry:
        raise ValueError(f"{kind} {name!r} is already registered (by an earlier plug-in); choose another name.")
    for need in spec.needs:
        if need not in PLAIN_NEEDS and not (need.startswith("stat:") and len(need) > 5):
            raise fail(f"{kind} {name!r}: each need", f"one of {{{', '.join(PLAIN_NEEDS)}}} or 'stat:<name>'", need)
    return False


def add_method_spec(spec: MethodSpec) -> None:
    """Enter a method into :data:`METHOD_SPECS` (``ValueError`` for a taken name or a malformed entry)."""
    if _check_entry("method", spec, BUILTIN_METHODS, METHOD_SPECS):
        return
    if spec.requires not in METHOD_REQUIREMENTS:
        check_choice(f"method {spec.name!r}: requires", spec.requires, METHOD_REQUIREMENTS)
    METHOD_SPECS[spec.name] = spec


def add_ablation_spec(spec: AblationSpec) -> None:
    """Enter an ablation into :data:`ABLATION_SPECS`; as :func:`add_method_spec`."""
    if _check_entry("ablation", spec, BUILTIN_ABLATIONS, ABLATION_SPECS):
        return
    if not spec.scopes or any(s not in SCOPES for s in spec.scopes):
        raise fail(f"ablation {spec.name!r}: scopes", f"a non-empty subset of {{{', '.join(SCOPES)}}}", spec.scopes)
    ABLATION_SPECS[spec.name] = spec


@dataclass(frozen=True)
class DistanceSpec:
    """A distance between a sample's layer profile and its class's reference profile (``profile`` diagnosis).

    Attributes
    ----------
    name : str
    description : str
    lower_bound, upper_bound : float
        Its range.
    needs_weights : bool
        Defined only for scores that are non-negative and sum to one per sample (LAYA alpha, ScalarMix weights).
    label : str
        How figures and printed lines name it.
    """

    name: str
    description: str
    lower_bound: float
    upper_bound: float
    needs_weights: bool
    label: str


DISTANCE_SPECS: dict[str, DistanceSpec] = {
    d.name: d
    for d in (
        DistanceSpec(
            "jensen_shannon",
            "Jensen-Shannon distance (base 2, the square root of the divergence) between "
            "the sample's layer weights and the reference weights.",
            0.0,
            1.0,
            True,
            "Jensen-Shannon distance",
        ),
        DistanceSpec(
            "cosine_minmax",
            "1 - cosine similarity of the per-sample min-max normalised scores "
            "((a - min a) / (max a - min a), in [0, 1] per layer) and the reference (the mean of the "
            "normalised scores); a constant score vector has no normalisation and no distance.",
            0.0,
            1.0,
            False,
            "cosine distance of min-max scores",
        ),
    )
}


@dataclass(frozen=True)
class PlantedFamilySpec:
    """A family of models whose layer relevance is known by construction (``laya-eval meta``).

    Attributes
    ----------
    name : str
    description : str
        What is planted and which layers count as relevant.
    """

    name: str
    description: str


PLANTED_FAMILY_SPECS: dict[str, PlantedFamilySpec] = {
    f.name: f
    for f in (
        PlantedFamilySpec(
            "subset",
            "The head reads a planted half of the layers (uniform weights) and gives the "
            "others weight 0, though they carry the same kind of information. Relevant: the read "
            "layers.",
        ),
        PlantedFamilySpec(
            "graded",
            "The head reads all but two layers with planted weights 1 : 2 : 4 : ... in a "
            "random order. Relevance: the weight (0 for the two unread layers).",
        ),
        PlantedFamilySpec(
            "noise",
            "Half of the layers are pure noise (a high-frequency pseudo-random function of the "
            "input) that the head reads with the same weight as the informative layers, but through a "
            "shift shared by every class: large logit terms, no effect on any probability. Relevant: "
            "the informative layers.",
        ),
        PlantedFamilySpec(
            "redundant",
            "Identity blocks copy one layer into the next ones: half of the layers are "
            "exact copies of one state, and only they are read (equal weights, one adapter). "
            "Relevant: the copies.",
        ),
        PlantedFamilySpec(
            "cancel",
            "A layer and its identity-block copy are read with opposite adapters, so their "
            "terms cancel exactly on every input; some other layers are read. Relevant: the other "
            "read layers; the cancelling pair's net contribution is 0.",
        ),
    )
}

#: The reference attributions ``laya-eval meta`` scores besides the methods, built from the planted relevance r.
PLANTED_REFERENCES: dict[str, str] = {
    "planted": "Ranks the layers by the planted relevance r (the faithful attribution by construction).",
    "inverted": "Ranks the layers by -r (unfaithful by construction).",
    "layer_index": "Ranks deeper layers first (score = layer index), whatever the model reads.",
}

# Heads and trainable backbones by registry name (laya_eval.models.heads.HEADS and laya_eval.models.backbones.BACKBONES check
# at import that they implement these; 'modules' wraps a Python object and is not a CLI choice).
HEAD_NAMES = ("lastlayer", "concat", "scalarmix", "laya")
BACKBONE_NAMES = ("mlp", "cnn", "vit", "hf")
#: Choice lists of owners that import torch (devices, tables, figures, heads, data; POOLS: hf mean/cls/last
#: (last: the last real token, the default of causal LMs), py the rest).
SPLITS, DTYPES, TABLE_FORMATS = ("train", "val", "test"), ("float32", "bfloat16", "float16"), ("csv", "parquet")
FIGURE_FORMATS, FIGURE_STYLES, PSI_CHOICES = ("png", "svg", "pdf"), ("default", "paper"), ("identity", "mlp")
POOLS, HF_POOLS = ("avg", "cls", "mean", "flatten", "last"), ("cls", "mean", "last")
MODULE_POOLS = ("avg", "cls", "flatten")
#: Sanity's similarities; the ablation of a run that names none, per scope (network scope has no terms to gate).
SIMILARITIES, DEFAULT_ABLATION = ("across_samples", "per_sample"), {"head": "gate", "network": "zero"}
#: Classifiers with depth mixers (laya_eval.mixers.reference), trained whole by `train`, audited by `mixers`.
MIXER_MODEL_KINDS = ("denseformer", "attnres")


def method_names() -> list[str]:
    """Registered method names, in registry order."""
    return list(METHOD_SPECS)


#: The layer scores of a causal LM on its own next-token prediction (``--target next-token``), in registry order;
#: the same name means the same idea as the classifier method (``laya_eval.language.methods`` documents each).
NEXT_TOKEN_METHODS = ("block_influence", "angular_distance", "grad_x_act", "atp", "ig", "logit_lens", "random")


def method_choices() -> list[str]:
    """What ``--methods`` accepts: every registered method, then the next-token methods not among them."""
    names = method_names()
    return names + [m for m in NEXT_TOKEN_METHODS if m not in names]


def default_methods_text() -> str:
    """What ``--methods`` runs when not given, in words: all registered methods but the opt-in ones."""
    opt_in = [m for m, spec in METHOD_SPECS.items() if spec.opt_in]
    return "all" if not opt_in else f"all but {', '.join(opt_in)}"


def in_registry_order(methods) -> list[str]:
    """The distinct names of ``methods``: registered ones in registry order, then the others as first seen."""
    present = list(dict.fromkeys(methods))
    return [m for m in METHOD_SPECS if m in present] + [m for m in present if m not in METHOD_SPECS]


def ablation_names() -> list[str]:
    """Registered ablation names, in registry order."""
    return list(ABLATION_SPECS)


def planted_family_names() -> list[str]:
    """The planted families of ``laya-eval meta``, in registry order."""
    return list(PLANTED_FAMILY_SPECS)


def fixed_ablation_names() -> list[str]:
    """Ablations defined at head scope whose replacement is the same for every sample (no donors, no random draws),
    in registry order: the ones that commands working on cached head inputs alone (``prune``, ``sanity``) can
    apply."""
    return [a for a, spec in ABLATION_SPECS.items() if not spec.drawn_per_sample and "head" in spec.scopes]


def distance_names() -> list[str]:
    """Registered diagnosis distances, in registry order."""
    return list(DISTANCE_SPECS)


#: Attribution methods over a depth mixer's sources (``laya-eval mixers``): name -> description.
MIXER_METHODS = {
    "mass": "the mixer's weight w_j(x) (after the softmax where there is one)",
    "norm_mass": "the norm of the weighted source, ||w_j(x) s_j||",
    "grad_x_weight": "w_j x d logit_c / d w_j (the other weights held, no renormalisation)",
    "ig": "integrated gradients of logit_c over the weights, from all-zero weights (Captum, Gauss-Legendre)",
    "random": "uniform random scores per sample and mixer (a baseline)",
}

#: How a source is removed from a depth mixer: name -> description.
MIXER_REMOVALS = {
    "weight": "the source's weight set to zero (its logit to -inf before a softmax: the other weights renormalise)",
    "mean": "the source state replaced by its mean over the evaluated data; the mixer recomputes its weights",
    "resample": "the source state replaced by a seeded donor sample's (as resample draws it), averaged over draws",
}
