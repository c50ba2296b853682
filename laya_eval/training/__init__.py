"""Training with the reference protocol: building a model from names, the one encode path (pooled hidden
states in memory or through the feature cache, :mod:`~laya_eval.training.features`), the training loop and
the head trainer on cached features (:mod:`~laya_eval.training.trainer`), and ``fit_head`` on a frozen model
(:mod:`~laya_eval.training.head_fit`).

May import: errors, checks, catalog, options, data, models, loading.
"""
