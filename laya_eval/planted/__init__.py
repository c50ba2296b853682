"""Planted ground truth: models whose layer relevance is known by construction, and how well every method,
ablation and metric recovers it (``laya-eval meta``).

:mod:`~laya_eval.planted.families` builds the planted models on real inputs; :mod:`~laya_eval.planted.scoring`
scores attributions against the planted relevance (AUROC, rank correlation) and the metrics by whether they
tell the planted-faithful attribution from planted-unfaithful ones; :mod:`~laya_eval.planted.run` runs every
family and seed through the evaluation engine and writes the result folder.

May import: errors, checks, catalog, options, version, output, stats, data, models, loading, engine, figures.
"""
