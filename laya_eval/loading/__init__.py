"""Bringing a model in: model specs (a checkpoint path, ``hf:``, ``py:``), checkpoints (save, read, load),
the checkpoint schema (checks only), the weights-fit check on the meta device, the probe-logit guard,
backbones stored by reference, the feature cache of frozen backbones, and Keras 3 LAYA models read as data.

May import: errors, checks, catalog, version, output, models.
"""
