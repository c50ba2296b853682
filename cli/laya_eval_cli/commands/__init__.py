"""All ``laya-eval`` subcommands, in the order ``--help`` lists them.

Modules are imported whole (``faithfulness.faithfulness`` is the command) so that
the module names stay reachable for tests.
"""

from laya_eval_cli.commands import (
    faithfulness,
    fit_head,
    import_keras,
    info,
    meta,
    mixers,
    profile,
    prune,
    report,
    sanity,
    sweep,
    train,
)

ALL = [
    train.train,
    fit_head.fit_head,
    faithfulness.faithfulness,
    profile.profile,
    sanity.sanity,
    prune.prune,
    mixers.mixers,
    report.report,
    sweep.sweep,
    meta.meta,
    import_keras.import_keras,
    info.info,
]
