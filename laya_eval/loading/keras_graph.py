"""The temperature of a Keras LAYA model, read from the layer graph of its ``config.json``.

In a functional model the temperature is neither a weight nor a layer option: it is the constant of the
``keras.ops`` node between the scorer's last ``Dense`` and the softmax, ``Softmax()(s / tau)`` (a
``TrueDivide`` or ``Divide`` node) or ``Softmax()(s * (1 / tau))`` (a ``Multiply`` node).
:func:`graph_temperature` follows the scorer's output, through the containers it ends (a ``Sequential``
scorer, a nested functional model), to the softmax and multiplies out the constant factors on the way.
Any other node on that path (a subtraction, a ``Lambda``, a second tensor, a second consumer) is refused
with its name: laya-eval cannot say what it computes. A head whose scorer is not in a graph (a subclassed
``keras.Model``: its inner layers are not in ``config.json``) gives ``None``.

See ``docs/commands/import-keras.md``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

__all__ = ["GraphTemperature", "Refusal", "graph_temperature"]

_DIVIDE = {"TrueDivide", "Divide"}
_MAX_STEPS = 10_000


class Refusal(Exception):
    """What did not fit the reference architecture; the importer adds the layers the file holds."""


@dataclass(frozen=True)
class GraphTemperature:
    """``tau`` as the graph computes it, and the nodes it was read from (empty: the scores go straight in)."""

    tau: float
    nodes: tuple[str, ...]


@dataclass(frozen=True)
class _Node:
    name: str
    class_name: str
    module: str
    config: dict
    calls: tuple[dict, ...]  # the inbound nodes: {"args": [...], "kwargs": {...}}

    @property
    def label(self) -> str:
        return f"{self.name[:60]!r} ({self.module[:40]}.{self.class_name[:40]})"


def _tensors(value: Any, depth: int = 0) -> Iterator[str]:
    """The producing layers' names of the Keras tensors in a call's arguments."""
    if depth > 16:
        return
    if isinstance(value, dict):
        history = (
            value.get("config", {}).get("keras_history") if value.get("class_name") == "__keras_tensor__" else None
        )
        if isinstance(history, list) and history and isinstance(history[0], str):
            yield history[0]
            return
        for item in value.values():
            yield from _tensors(item, depth + 1)
    elif isinstance(value, list):
        for item in value:
            yield from _tensors(item, depth + 1)


def _graphs(objects: Iterable[dict]) -> list[tuple[str, list[_Node], list[str]]]:
    """Every container of layers: ``(its name, its layers, the names its output comes from)``."""
    found = []
    for obj in objects:
        cfg = obj["config"]
        entries = cfg.get("layers")
        if not isinstance(entries, list):
            continue
        nodes = []
        for entry in entries:
            if not isinstance(entry, dict) or not isinstance(entry.get("config"), dict):
                continue
            name = entry["config"].get("name", entry.get("name"))
            calls = entry.get("inbound_nodes") if isinstance(entry.get("inbound_nodes"), list) else []
            if isinstance(name, str):
                nodes.append(
                    _Node(
                        name,
                        str(entry.get("class_name")),
                        str(entry.get("module")),
                        entry["config"],
                        tuple(c for c in calls if isinstance(c, dict)),
                    )
                )
        if obj["class_name"] == "Sequential":
            outputs = [nodes[-1].name] if nodes else []
        else:
            declared = cfg.get("output_layers") or []
            declared = [declared] if declared and isinstance(declared[0], str) else declared  # one output, unnested
            outputs = [o[0] for o in declared if isinstance(o, list) and o and isinstance(o[0], str)]
        found.append((str(cfg.get("name")), nodes, outputs))
    return found


def _constant(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def _softmax_axis_is_last(node: _Node, call: dict) -> bool:
    if node.module == "keras.layers" and node.class_name == "Activation":
        return node.config.get("activation") == "softmax"
    if node.class_name != "Softmax" or node.module not in ("keras.layers", "keras.src.ops.nn"):
        return False
    axis = node.config.get("axis", -1)
    args = call.get("args") or []
    shape = args[0].get("config", {}).get("shape") if args and isinstance(args[0], dict) else None
    last = len(shape) - 1 if isinstance(shape, list) else None
    return axis in (-1, [-1], last, [last])


def _scale(node: _Node, call: dict, source: str) -> float | None:
    """The factor a ``keras.ops`` division or multiplication of ``source`` by a positive constant applies."""
    if not node.module.startswith("keras.src.ops") or call.get("kwargs"):
        return None
    args = call.get("args") or []
    if len(args) != 2 or list(_tensors(args)) != [source]:
        return None
    if node.class_name in _DIVIDE and _constant(args[1]) and list(_tensors(args[0])) == [source]:
        return 1.0 / float(args[1])
    if node.class_name == "Multiply":
        constant = args[1] if list(_tensors(args[0])) == [source] else args[0]
        return float(constant) if _constant(constant) else None
    return None


def graph_temperature(objects: Iterable[dict], scorer: str) -> GraphTemperature | None:
    """The temperature between the Dense layer ``scorer`` and the softmax, or ``None`` where no graph holds it.

    Parameters
    ----------
    objects : iterable of dict
        Every serialised Keras object of ``config.json`` (``class_name`` and a dict ``config``).
    scorer : str
        The name of the scorer's last ``Dense`` layer (its output is the scores ``s``).

    Raises
    ------
    Refusal
        A node on the way that is not a softmax over the last axis, nor a division or multiplication by a
        positive constant; a path that forks or ends without a softmax.
    """
    graphs = _graphs(objects)
    current, factor, nodes = scorer, 1.0, []
    for _ in range(_MAX_STEPS):
        home = next(
            ((name, members, outs) for name, members, outs in graphs if any(n.name == current for n in members)), None
        )
        if home is None:
            if current == scorer:
                return None
            raise Refusal(f"the scores leave {current!r}, which no graph of the config holds, before any softmax")
        container, members, outputs = home
        users = [(n, c) for n in members for c in n.calls if current in _tensors(c)]
        if not users and current in outputs and container != current:
            current = container  # the scorer ends a Sequential or a nested model: follow it outside
            continue
        if len(users) != 1:
            where = [n.name[:60] for n, _ in users][:4]
            raise Refusal(
                f"the scores of {scorer!r} go to {len(users)} nodes {where} after {current!r}; laya-eval reads one "
                "path from the scorer to the softmax"
            )
        node, call = users[0]
        if _softmax_axis_is_last(node, call) and list(_tensors(call)) == [current]:
            return GraphTemperature(1.0 / factor, tuple(nodes))
        step = _scale(node, call, current)
        if step is None:
            raise Refusal(
                f"node {node.label} lies between the scorer {scorer!r} and the softmax; laya-eval reads there "
                "only a division or a multiplication by a positive constant (the temperature) and a softmax over "
                "the last axis"
            )
        factor, current = factor * step, node.name
        nodes.append(node.name[:60])
    raise Refusal(f"the path from the scorer {scorer!r} does not reach a softmax")
