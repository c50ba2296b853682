"""The evaluation engine, in the order it runs: :mod:`~laya_eval.engine.plan` (resolve the model, data,
methods, ablations and what they need) -> :mod:`~laya_eval.engine.evaluation` (collect per-sample
records batch by batch, merge, summarize) -> :mod:`~laya_eval.engine.results` (metrics, intervals,
tables, manifest). The method registry (:mod:`~laya_eval.engine.methods`), the removals
(:mod:`~laya_eval.engine.removals`), records, dataset statistics, partial runs and torchrun sharding live
here too.

May import: errors, checks, catalog, options, output, stats, data, models, loading.
"""
