"""A causal language model as its own classifier: its next-token prediction is the target.

:mod:`~laya_eval.language.text` reads text (``--data text:FILE``, named corpora), splits it by document and cuts
windows of tokens; :mod:`~laya_eval.language.decoder` loads ``hf:`` causal LMs with their LM head and runs their
blocks with replacements (``skip`` and the other network-scope removals); :mod:`~laya_eval.language.draws` draws
the fills of ``resample``, ``noise`` and their update forms per window; :mod:`~laya_eval.language.methods` holds the registered layer scores (Block Influence, angular distance, gradients, attribution patching,
Integrated Gradients, logit lens, random); :mod:`~laya_eval.language.evaluation` scores them against the loss
increase of removing each block (``faithfulness --target next-token``); :mod:`~laya_eval.language.pruning`
removes blocks in each score's order and reports held-out perplexity (``prune --target next-token``).

May import: errors, checks, catalog, options, output, stats, data, models, loading, engine, figures, pruning.
"""

from laya_eval.language.evaluation import evaluate_next_token
from laya_eval.language.methods import NEXT_TOKEN_REGISTRY, register_next_token_method
from laya_eval.language.text import TextWindows, read_documents, windows

__all__ = [
    "NEXT_TOKEN_REGISTRY",
    "TextWindows",
    "evaluate_next_token",
    "read_documents",
    "register_next_token_method",
    "windows",
]
