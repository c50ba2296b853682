"""Class-wise layer profiles of a method's scores (:mod:`~laya_eval.profiling.profiles`) and the
diagnosis of errors from attention shift (:mod:`~laya_eval.profiling.diagnosis`).

May import: errors, checks, catalog, options, output, stats, figures, engine.
"""
