"""Depth mixers inside a network: modules whose output is ``sum_j w_j(x) s_j`` over source states produced
earlier (DenseFormer-style depth-weighted averages, AttnRes-style softmax over depth, any module that follows
the protocol). :mod:`~laya_eval.mixers.protocol` defines the protocol, how the weights are read and how one
source is removed from one mixer; :mod:`~laya_eval.mixers.reference` holds two small transformer classifiers
built on it (over image patches or word tokens, :mod:`~laya_eval.mixers.vocabulary`) and their checkpoint files;
:mod:`~laya_eval.mixers.training` trains them for ``laya-eval train``; :mod:`~laya_eval.mixers.audit` scores
attributions over each mixer's sources against the effect of removing them, measured at the model output.

May import: errors, checks, catalog, options, output, stats, data, models, loading, engine, training, figures.
"""
