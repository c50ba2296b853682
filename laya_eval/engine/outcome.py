"""What :func:`laya_eval.evaluate` returns and writes: :class:`Evaluation`, one result per ablation, and how much the
verdict depends on the operator across them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from laya_eval.engine.results import EvaluationResult, result_files
from laya_eval.output.files import write_result_folder

__all__ = ["Evaluation", "operators_of", "write_evaluation"]


@dataclass
class Evaluation(Mapping[str, EvaluationResult]):
    """What :func:`laya_eval.evaluate` returns: one :class:`EvaluationResult` per ablation (a mapping in the order
    evaluated), how much the verdict depends on the operator when there are several, and the files written.

    With one ablation its tables read directly: ``evaluation.summary`` is ``evaluation[ablation].summary``.

    Attributes
    ----------
    results : dict of str to EvaluationResult
    operators : OperatorSensitivity or None
        Kendall's W of the method ranking across the ablations, its permutation p-value and the best method per
        ablation (``operators.csv``); None for one ablation. Computed when first read (a permutation test: a caller
        that reads only the tables does not pay for it), once.
    files : list of Path
        The files written under ``out`` (empty when nothing was written).
    """

    results: dict[str, EvaluationResult]
    files: list[Path] = field(default_factory=list)
    _operators: Any = field(default=None, init=False, repr=False, compare=False)

    @property
    def operators(self):
        if self._operators is None and len(self.results) > 1:
            self._operators = operators_of(self.results)
        return self._operators

    def __getitem__(self, ablation: str) -> EvaluationResult:
        return self.results[ablation]

    def __iter__(self):
        return iter(self.results)

    def __len__(self) -> int:
        return len(self.results)

    def _only(self) -> EvaluationResult:
        if len(self.results) != 1:
            raise AttributeError(
                f"this evaluation holds {len(self.results)} ablations ({', '.join(self.results)}); "
                "read one of them: evaluation[ABLATION]"
            )
        return next(iter(self.results.values()))

    layers = property(lambda self: self._only().layers, doc="The one ablation's ``layers`` table.")
    samples = property(lambda self: self._only().samples, doc="The one ablation's ``samples`` table.")
    summary = property(lambda self: self._only().summary, doc="The one ablation's ``summary`` table.")
    comparisons = property(lambda self: self._only().comparisons, doc="The one ablation's ``comparisons``.")
    manifest = property(lambda self: self._only().manifest, doc="The one ablation's manifest.")
    donors = property(lambda self: self._only().donors, doc="The one ablation's ``donors`` table (or None).")
    verdict = property(lambda self: self._only().verdict, doc="The one ablation's verdict (``ok`` or the rules).")
    model_state = property(
        lambda self: next(iter(self.results.values())).model_state,
        doc="The model's accuracy on the evaluated samples beside chance (the same under every ablation).",
    )

    @property
    def notes(self) -> list[str]:
        """Methods skipped because they do not apply to the head, with the reason (the same for every ablation)."""
        return next(iter(self.results.values())).notes if self.results else []

    @property
    def warnings(self) -> list[str]:
        """Every ablation's warnings, each once, in order."""
        return list(dict.fromkeys(w for r in self.results.values() for w in r.warnings))


def operators_of(results: Mapping[str, EvaluationResult]):
    """Operator sensitivity of several ablations' results (:func:`laya_eval.engine.operators.operator_sensitivity`,
    seeded by the run's seed), or None for one."""
    if len(results) < 2:
        return None
    from laya_eval.engine.operators import operator_sensitivity

    seed = next(iter(results.values())).manifest.get("seed", 0)
    return operator_sensitivity({a: r.summary for a, r in results.items()}, seed=seed)


def write_evaluation(evaluation: Evaluation, out_dir: str | os.PathLike, *, table_format: str = "csv") -> list[Path]:
    """Write an evaluation into ``out_dir``, replacing the folder whole: layers, samples, summary, comparisons and
    manifest (one subfolder per ablation and ``operators.csv`` when several). See
    :func:`laya_eval.output.files.write_result_folder`."""
    return write_result_folder(
        out_dir, result_files(evaluation.results, operators=evaluation.operators, table_format=table_format)
    )
