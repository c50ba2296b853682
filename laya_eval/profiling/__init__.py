"""Class-wise layer profiles of a method's scores (:mod:`~laya_eval.profiling.profiles`), the
diagnosis of errors from attention shift (:mod:`~laya_eval.profiling.diagnosis`), their result folder
(:mod:`~laya_eval.profiling.output`) and the ``profile`` verb (:mod:`~laya_eval.profiling.run`).

May import: errors, checks, catalog, options, output, stats, figures, engine.
"""
