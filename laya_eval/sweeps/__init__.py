"""Sweeps: a grid of datasets × models × heads × seeds, trained, evaluated and aggregated from one config.

:func:`laya_eval.sweeps.run.sweep` reads a TOML config (:mod:`laya_eval.sweeps.config`, checked whole before
any work), and for every cell trains a built-in backbone + head (:func:`laya_eval.train`) or fits a head on a
frozen model named by a spec (:func:`laya_eval.fit_head`, through the shared feature cache), writes the
checkpoint and evaluates it into the standard result folder. A finished cell whose key (its full config, the
package version and the data's content) matches and whose files verify is not redone. The aggregate tables across cells and seeds
are in :mod:`laya_eval.sweeps.aggregate`.

May import: errors, checks, catalog, options, version, output, stats, data, models, loading, engine, training, figures, profiling, sanity_checks, pruning, reporting.
"""
