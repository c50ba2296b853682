"""``profile``: the class-wise layer profile of one attribution method, computed by the engine (one backbone pass
per batch, the registered method) and, given ``out``, written as a result folder."""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any

from laya_eval.profiling.diagnosis import DiagnosisOptions
from laya_eval.profiling.output import _write_profile
from laya_eval.profiling.profiles import LayerProfile, _check_by, _check_method, profile_from_result

__all__ = ["profile"]


def profile(
    model: Any,
    data: Any = None,
    *,
    out: str | os.PathLike | None = None,
    method: str = "laya",
    by: str = "label",
    options: Any = None,
    data_dir: str | os.PathLike | None = None,
    progress: Any = None,
    world: Any = None,
    diagnosis: DiagnosisOptions | None = DiagnosisOptions(),
    fmt: str | None = None,
    style: str = "default",
) -> LayerProfile | None:
    """Class-wise layer profile of one attribution method (``laya-eval profile``).

    ``out``, ``fmt``, ``style``, ``method`` and ``by`` are checked before any work. Given ``out``, the folder is
    written whole: ``profile.csv``, ``profile_layers.csv``, ``profile.json``, with a diagnosis ``diagnosis.csv``
    (:data:`~laya_eval.profiling.diagnosis.DIAGNOSIS_COLUMNS`) and ``diagnosis_summary.csv``
    (:data:`~laya_eval.profiling.diagnosis.SUMMARY_COLUMNS`), the figures
    ``profile_heatmap_{all,correct,incorrect}.<fmt>`` (one per subset with samples, one colour range),
    ``profile_layers.<fmt>`` (violins of the per-sample scores per layer, correct and incorrect predictions side
    by side) and ``diagnosis.<fmt>`` (distance ECDFs, ROC curve), and ``manifest.json`` (the sha256 of every file).
    It is written into a temporary folder and swapped in: an interrupted run leaves the previous result untouched,
    and no file of an earlier run stays beside the new ones.

    Parameters
    ----------
    model : LayeredModel or model spec
        A checkpoint path, ``hf:DIR`` or ``py:MODULE:CALLABLE`` (``options.trust_code``), or a LayeredModel.
    data : Dataset, dataset name, or None
        ``None``: the checkpoint's dataset, split ``options.split``.
    out : path, optional
        The folder to write (replaced whole); ``None``: nothing is written.
    method : str
        A registered method (:data:`laya_eval.engine.methods.METHODS`: ``laya``, ``static``, ``ig``, ...,
        installed plug-ins included).
    by : {"label", "pred"}
        Group samples by their true (default) or predicted class.
    options : EvalOptions, optional
        Split, limit, batch size, scope, seed, device, IG steps; its ``methods`` and ``bootstrap`` are ignored.
    data_dir : path, optional
    progress : tqdm-like, optional
    world : laya_eval.engine.distributed.World, optional
        Under torchrun each process profiles its shard; rank 0 gets the profile and writes ``out``, the other
        ranks get ``None``.
    diagnosis : DiagnosisOptions or None
        The error diagnosis from attention shift (:mod:`laya_eval.profiling.diagnosis`); by default
        ``DiagnosisOptions()``: reference class = predicted class, distance chosen from the scores, 1000
        stratified bootstrap resamples, seeded with ``options.seed``. ``None``: none.
    fmt : {"png", "svg", "pdf"}, optional
        The figures' format: png, or pdf in paper style.
    style : {"default", "paper"}
        Paper style: no titles, paper column widths; each figure's caption is written beside it as
        ``NAME.caption.txt``.

    Returns
    -------
    LayerProfile, or None on ranks other than 0
        With the files written (``files``, ``manifest.json`` last) and the wall time.

    Raises
    ------
    ConfigError
        ``out`` cannot be written, a bad ``fmt``, ``style``, ``by``, an unknown method, or a method that does not
        apply to the model's head.

    Examples
    --------
    >>> prof = profile("ckpt.pt", method="laya", out="profile-out")  # doctest: +SKIP
    >>> prof.table.query("subset == 'all'").pivot(index="class_name", columns="layer", values="mean")  # doctest: +SKIP
    """
    from laya_eval.engine.distributed import SINGLE_PROCESS
    from laya_eval.engine.evaluation import EvalOptions, evaluate
    from laya_eval.figures import check_format, check_style
    from laya_eval.output.files import check_output_folder

    start = time.perf_counter()
    if out is not None:
        check_output_folder(out)
    check_style(style)
    if fmt is not None:
        check_format(fmt)
    _check_method(method)
    _check_by(by)
    options = dataclasses.replace(options or EvalOptions(), methods=(method,), bootstrap=0)
    results = evaluate(
        model, data, options=options, data_dir=data_dir, progress=progress, world=world or SINGLE_PROCESS
    )
    if results is None:
        return None
    result = results[options.ablations[0]]  # a method that does not apply was refused while planning
    prof = profile_from_result(
        result, method=method, class_names=tuple(result.manifest["class_names"]), by=by, diagnosis=diagnosis
    )
    if out is not None:
        prof.files = _write_profile(prof, out, fmt=fmt, style=style)
    prof.wall_time_s = time.perf_counter() - start
    return prof
