"""Keras LAYA models of the paper's reference architecture, brought in as laya-eval models.

The reference code (Vessio, 2025; ``github.com/gvessio/LAYA``) is a Keras model: an MLP whose blocks are
``Dense -> LayerNormalization -> Activation("gelu")`` (hidden ``[512, 256, 128]`` on Fashion-MNIST) and a
LAYA head with one ``Dense(d*)`` adapter per block, a scorer ``Dense(hidden, gelu) -> Dense(L)`` over the
concatenated adapted states, ``alpha = softmax(s / tau)`` and a ``Dense(C)`` classifier of
``sum_i alpha_i z_i`` (``d* = 96``, ``tau = 1.5``, scorer hidden 192). :func:`import_keras` reads such a
model from a Keras 3 file (:mod:`laya_eval.loading.keras_files`: data only, no Keras, no TensorFlow) and
returns the same function as a :class:`~laya_eval.models.layered.LayeredModel` of the ``mlp`` backbone and
the ``laya`` head:

- roles come from the weights' shapes and Keras' storage order, so a functional model and one whose head
  is a subclassed ``keras.Model`` are read alike; the backbone's ``Dense`` layers are the ones stored
  beside its ``LayerNormalization`` layers, and must chain ``in -> widths[0] -> widths[1] ...``;
- kernels are ``(in, out)`` in Keras and transposed for ``nn.Linear``; a LayerNormalization's variables are
  ``gamma, beta`` in that order; its epsilon (Keras' default 1e-3) comes from the config;
- Keras' ``"gelu"`` is the exact (erf) form, as ``nn.GELU()``; every activation and option the config
  names is checked, and a built-in layer laya-eval cannot reproduce (``Rescaling``, ``BatchNormalization``,
  an approximate GELU, a psi MLP) is refused;
- ``tau`` is no weight: in a functional model it is read from the graph between the scorer and the softmax
  (:mod:`laya_eval.loading.keras_graph`; a node there it cannot read is refused), else from a layer config's
  ``tau`` entry where the head stores one (a subclassed head's ``get_config``), else taken from the ``tau``
  argument (default 1.5, the reference value); where it came from is recorded in the model's
  ``training["imported_from"]``.

Anything else is refused with one line naming what did not fit and the layers the file holds.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from laya_eval.errors import CheckpointError, ConfigError
from laya_eval.loading.keras_files import KerasFile, KerasLayer, read_keras_file
from laya_eval.loading.keras_graph import Refusal as _Refusal
from laya_eval.loading.keras_graph import graph_temperature
from laya_eval.models.backbones.blocks import MLPBackbone
from laya_eval.models.heads import LayaHead
from laya_eval.models.layered import LayeredModel, ModelInfo

__all__ = ["REFERENCE_TAU", "import_keras"]

REFERENCE_TAU = 1.5  # the reference notebook's fixed temperature (not stored in its files)
KERAS_LAYER_NORM_EPS = 1e-3  # keras.layers.LayerNormalization's default epsilon
_WEIGHTLESS = {"InputLayer", "Activation", "Concatenate", "Dropout", "Flatten", "Reshape", "Softmax"}
_ACTIVATIONS = {"linear", "gelu", "softmax"}
_MAX_CONFIG_NODES = 200_000
_MAX_LISTED = 40


@dataclass(frozen=True)
class _Dense:
    layer: KerasLayer

    @property
    def fan_in(self) -> int:
        return self.layer.shapes[0][0]

    @property
    def fan_out(self) -> int:
        return self.layer.shapes[0][1]

    def tensors(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(weight (out, in), bias (out,))`` for ``nn.Linear``; a layer without bias gets zeros."""
        kernel = self.layer.arrays[0]
        bias = self.layer.arrays[1] if len(self.layer.arrays) == 2 else np.zeros(kernel.shape[1], np.float32)
        return torch.from_numpy(np.ascontiguousarray(kernel.T)), torch.from_numpy(np.array(bias))


@dataclass(frozen=True)
class _Roles:
    backbone: list[_Dense]
    norms: list[KerasLayer]
    adapters: list[_Dense]
    scorer: tuple[_Dense, _Dense]
    classifier: _Dense

    @property
    def widths(self) -> list[int]:
        return [n.shapes[0][0] for n in self.norms]

    def names(self) -> dict[str, Any]:
        return {
            "backbone": [d.layer.name for d in self.backbone],
            "layer_norms": [n.name for n in self.norms],
            "adapters": [d.layer.name for d in self.adapters],
            "scorer": [d.layer.name for d in self.scorer],
            "classifier": self.classifier.layer.name,
        }


def _listing(layers: Sequence[KerasLayer]) -> str:
    parts = [f"{layer.name} {'/'.join('x'.join(map(str, s)) for s in layer.shapes)}" for layer in layers[:_MAX_LISTED]]
    more = f" … and {len(layers) - _MAX_LISTED} more" if len(layers) > _MAX_LISTED else ""
    return ", ".join(parts) + more if parts else "none"


def _kinds(layers: Sequence[KerasLayer]) -> tuple[list[_Dense], list[KerasLayer]]:
    dense, norms = [], []
    for layer in layers:
        dims = [len(s) for s in layer.shapes]
        if dims == [2] or (dims == [2, 1] and layer.shapes[1][0] == layer.shapes[0][1]):
            dense.append(_Dense(layer))
        elif dims == [1, 1] and layer.shapes[0] == layer.shapes[1]:
            norms.append(layer)
        else:
            raise _Refusal(
                f"layer {layer.name!r} holds variables of shapes {list(layer.shapes)}, neither a Dense "
                "(kernel, bias) nor a LayerNormalization (gamma, beta)"
            )
    return dense, norms


def _take(pool: list[_Dense], fits, what: str) -> _Dense:
    for d in pool:
        if fits(d):
            pool.remove(d)
            return d
    raise _Refusal(f"no Dense layer fits {what}")


def _roles(layers: Sequence[KerasLayer]) -> _Roles:
    dense, norms = _kinds(layers)
    if not norms:
        raise _Refusal("no LayerNormalization layers (the backbone's blocks are Dense -> LayerNormalization -> GELU)")
    if len({n.parent for n in norms}) != 1:
        raise _Refusal("the LayerNormalization layers are stored in different containers")
    widths = [n.shapes[0][0] for n in norms]
    n_layers = len(norms)
    siblings = [d for d in dense if d.layer.parent == norms[0].parent][:n_layers]
    for i, d in enumerate(siblings):
        if d.fan_out != widths[i] or (i and d.fan_in != widths[i - 1]):
            raise _Refusal(
                f"the backbone's Dense layer {d.layer.name!r} maps {d.fan_in} -> {d.fan_out}; block {i + 1} "
                f"needs {'any' if not i else widths[i - 1]} -> {widths[i]}"
            )
    if len(siblings) != n_layers:
        raise _Refusal(f"{n_layers} LayerNormalization layers but {len(siblings)} Dense layers beside them")
    rest = [d for d in dense if d not in siblings]
    first = next((d for d in rest if d.fan_in == widths[0]), None)
    if first is None:
        raise _Refusal(f"no adapter Dense layer reads block 1's {widths[0]} features")
    d_star = first.fan_out
    adapters = [
        _take(rest, lambda d, w=w: (d.fan_in, d.fan_out) == (w, d_star), f"adapter {i + 1} ({w} -> {d_star})")
        for i, w in enumerate(widths)
    ]
    if len(rest) != 3:
        extra = [d.layer.name for d in rest]
        psi = (
            " (a psi MLP is not supported: the reference code's psi ends in a GELU, laya-eval's does not)"
            if len(rest) > 3
            else ""
        )
        raise _Refusal(
            f"after the backbone and the adapters, {len(rest)} Dense layers remain ({extra}); the head "
            f"has a scorer of two and a classifier{psi}"
        )
    score_in = _take(rest, lambda d: d.fan_in == n_layers * d_star, f"the scorer's input ({n_layers} x {d_star})")
    score_out = _take(
        rest,
        lambda d: (d.fan_in, d.fan_out) == (score_in.fan_out, n_layers),
        f"the scorer's output ({score_in.fan_out} -> {n_layers})",
    )
    classifier = _take(rest, lambda d: d.fan_in == d_star and d.fan_out >= 2, f"the classifier ({d_star} -> classes)")
    return _Roles(siblings, norms, adapters, (score_in, score_out), classifier)


# --------------------------------------------------------------------------- config checks
def _objects(node: Any, depth: int = 0, budget: list[int] | None = None) -> Iterator[dict]:
    """Every serialised Keras object (a dict with ``class_name`` and a dict ``config``) in the config, depth-first."""
    budget = [0] if budget is None else budget
    budget[0] += 1
    if depth > 64 or budget[0] > _MAX_CONFIG_NODES:
        raise _Refusal("config.json is nested deeper or larger than a Keras model config")
    if isinstance(node, dict):
        if isinstance(node.get("class_name"), str) and isinstance(node.get("config"), dict):
            yield node
        for value in node.values():
            yield from _objects(value, depth + 1, budget)
    elif isinstance(node, list):
        for value in node:
            yield from _objects(value, depth + 1, budget)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True)
class _ConfigFacts:
    layer_norm_eps: float | None
    tau: float | None
    tau_from: str
    input_shape: tuple[int, ...] | None


def _check_dense(cfg: dict, name: str, allowed: set[str]) -> None:
    activation = cfg.get("activation", "linear")
    if not isinstance(activation, str) or activation not in allowed:
        raise _Refusal(
            f"Dense layer {name!r} has activation {str(activation)[:40]!r}; here it must be "
            f"{' or '.join(sorted(allowed))}"
        )


def _config_facts(config: dict | None, roles: _Roles) -> _ConfigFacts:
    if config is None:
        return _ConfigFacts(None, None, "", None)
    by_name: dict[str, dict] = {}
    eps, taus, shape, gelus = set(), set(), None, 0
    objects = list(_objects(config))
    graph = graph_temperature(objects, roles.scorer[1].layer.name)
    for obj in objects:
        cls, cfg, builtin = obj["class_name"], obj["config"], obj.get("module") == "keras.layers"
        if isinstance(cfg.get("name"), str):
            by_name.setdefault(cfg["name"], cfg)
        for key in ("tau", "temperature"):
            if _number(cfg.get(key)) and cfg[key] > 0:
                taus.add(float(cfg[key]))
        if not builtin:
            continue
        if cls == "LayerNormalization":
            axis = cfg.get("axis", -1)
            if (
                not (cfg.get("center", True) and cfg.get("scale", True))
                or cfg.get("rms_scaling")
                or axis not in (-1, [-1])
                or not _number(cfg.get("epsilon", 1e-3))
                or cfg.get("epsilon", 1e-3) <= 0
            ):
                raise _Refusal(
                    f"LayerNormalization {cfg.get('name')!r} is not centred and scaled over the last "
                    "axis with a positive epsilon"
                )
            eps.add(float(cfg.get("epsilon", KERAS_LAYER_NORM_EPS)))
        elif cls == "Activation":
            if not isinstance(cfg.get("activation"), str) or cfg["activation"] not in _ACTIVATIONS:
                raise _Refusal(
                    f"Activation {cfg.get('name')!r} is {str(cfg.get('activation'))[:40]!r}; laya-eval "
                    f"reproduces {sorted(_ACTIVATIONS)} (Keras' gelu is the exact erf form)"
                )
            gelus += cfg.get("activation") == "gelu"
        elif cls == "InputLayer":
            batch = cfg.get("batch_shape", cfg.get("batch_input_shape"))
            if isinstance(batch, list) and len(batch) >= 2 and all(isinstance(s, int) and s > 0 for s in batch[1:]):
                shape = tuple(batch[1:])
        elif cls not in _WEIGHTLESS | {"Dense", "LayerNormalization"}:
            raise _Refusal(f"built-in layer {cls} {cfg.get('name')!r} has no counterpart in the reference architecture")
    if len(eps) > 1:
        raise _Refusal(f"the LayerNormalization layers use different epsilons {sorted(eps)}")
    if graph is not None and any(not math.isclose(t, graph.tau, rel_tol=1e-6) for t in taus):
        raise _Refusal(
            f"the graph scales the scores by 1/{graph.tau:g}, but the config names the temperature {sorted(taus)}"
        )
    taus = {graph.tau} if graph is not None else taus
    if len(taus) > 1:
        raise _Refusal(f"the config names several temperatures {sorted(taus)}")
    if gelus < len(roles.norms):
        raise _Refusal(f"{len(roles.norms)} backbone blocks but {gelus} Activation('gelu') layers in the config")
    checks = [(d, {"linear"}) for d in [*roles.backbone, *roles.adapters, roles.scorer[1]]]
    checks += [(roles.scorer[0], {"gelu"}), (roles.classifier, {"linear", "softmax"})]
    for dense, allowed in checks:
        if dense.layer.name in by_name:
            _check_dense(by_name[dense.layer.name], dense.layer.name, allowed)
    tau_from = "config"
    if graph is not None:
        tau_from = f"graph: {', '.join(graph.nodes)}" if graph.nodes else "graph: the scores go straight to the softmax"
    return _ConfigFacts(eps.pop() if eps else None, taus.pop() if taus else None, tau_from, shape)


# --------------------------------------------------------------------------- building
def _state_dict(roles: _Roles) -> dict[str, torch.Tensor]:
    state: dict[str, torch.Tensor] = {}
    for i, (dense, norm) in enumerate(zip(roles.backbone, roles.norms)):
        state[f"backbone.blocks.{i}.0.weight"], state[f"backbone.blocks.{i}.0.bias"] = dense.tensors()
        gamma, beta = norm.arrays  # Keras creates gamma before beta
        state[f"backbone.blocks.{i}.1.weight"] = torch.from_numpy(np.array(gamma))
        state[f"backbone.blocks.{i}.1.bias"] = torch.from_numpy(np.array(beta))
    for i, dense in enumerate(roles.adapters):
        state[f"head.adapters.{i}.weight"], state[f"head.adapters.{i}.bias"] = dense.tensors()
    for key, dense in (
        ("head.scorer.0", roles.scorer[0]),
        ("head.scorer.2", roles.scorer[1]),
        ("head.classifier", roles.classifier),
    ):
        state[f"{key}.weight"], state[f"{key}.bias"] = dense.tensors()
    return state


def _resolve_tau(stored: float | None, stored_from: str, tau: float | None) -> tuple[float, str]:
    if tau is not None and (not _number(tau) or tau <= 0):
        raise ConfigError(f"tau must be a positive finite number; got {tau!r}.")
    if stored is not None and tau is not None and not math.isclose(stored, tau, rel_tol=1e-9):
        raise ConfigError(
            f"tau {tau} contradicts the temperature {stored} stored in the file's config; drop the "
            "option or check the file."
        )
    if stored is not None:
        return stored, stored_from
    return (float(tau), "option") if tau is not None else (REFERENCE_TAU, "reference default")


def _resolve_shape(
    in_features: int, stored: tuple[int, ...] | None, input_shape: Sequence[int] | None
) -> tuple[int, ...]:
    shape = tuple(int(s) for s in input_shape) if input_shape is not None else stored or (in_features,)
    if not shape or min(shape) < 1 or math.prod(shape) != in_features:
        raise ConfigError(
            f"input_shape must be positive sizes whose product is the backbone's {in_features} "
            f"input features; got {list(shape)}."
        )
    return shape


def import_keras(
    path: str | os.PathLike, *, tau: float | None = None, input_shape: Sequence[int] | None = None
) -> LayeredModel:
    """A Keras 3 LAYA model of the reference architecture as a laya-eval model (the ``mlp`` backbone and
    the ``laya`` head), read from the file as data.

    Parameters
    ----------
    path : str or PathLike
        A ``.keras`` archive or a ``.weights.h5`` file written by Keras 3.
    tau : float, optional
        The head's temperature where the file stores none (the reference code keeps it as a constant in
        Python); default 1.5, the reference value. Contradicting a stored temperature is an error.
    input_shape : sequence of int, optional
        Per-sample input shape the model will be evaluated on, e.g. ``(1, 28, 28)`` for laya-eval's
        Fashion-MNIST; its product must be the first Dense layer's input size. Default: the Keras
        ``Input``'s shape, or ``(in_features,)``.

    Returns
    -------
    LayeredModel
        In eval mode; ``info.training["imported_from"]`` records the file, its sha256, the Keras layer
        behind each role and where ``tau`` and the LayerNorm epsilon came from.

    Raises
    ------
    CheckpointError
        An unreadable or unsafe file, or an architecture other than the reference one.
    ConfigError
        A ``tau`` or ``input_shape`` that does not fit.
    """
    keras_file: KerasFile = read_keras_file(path)
    try:
        roles = _roles(keras_file.layers)
        facts = _config_facts(keras_file.config, roles)
    except _Refusal as why:
        raise CheckpointError(
            f"'{keras_file.path}' is not the reference LAYA architecture (Dense -> "
            f"LayerNormalization -> GELU blocks, adapters, a 2-layer scorer, a classifier): {why}; "
            f"layers with weights: {_listing(keras_file.layers)}."
        ) from None
    tau_value, tau_from = _resolve_tau(facts.tau, facts.tau_from, tau)
    in_features = roles.backbone[0].fan_in
    shape = _resolve_shape(in_features, facts.input_shape, input_shape)
    eps = facts.layer_norm_eps if facts.layer_norm_eps is not None else KERAS_LAYER_NORM_EPS
    widths, d_star = roles.widths, roles.adapters[0].fan_out
    backbone = MLPBackbone(in_features, widths, layer_norm_eps=eps)
    head = LayaHead(
        widths, roles.classifier.fan_out, d_star=d_star, tau=tau_value, scorer_hidden=roles.scorer[0].fan_out
    )
    imported = {
        "format": keras_file.kind,
        "file": keras_file.path.name[:200],
        "sha256": keras_file.sha256,
        "keras_version": str((keras_file.metadata or {}).get("keras_version", "unknown"))[:40],
        "tau_from": tau_from,
        "layer_norm_eps_from": "config" if facts.layer_norm_eps is not None else "Keras default",
        "layers": roles.names(),
    }
    info = ModelInfo(num_classes=head.num_classes, input_shape=shape, training={"imported_from": imported})
    model = LayeredModel(backbone, head, info)
    model.load_state_dict(_state_dict(roles), strict=True)
    return model.eval()
