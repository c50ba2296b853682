"""What identifies a Hugging Face model folder besides its weights: the sha256 of its other files.

transformers decides an encoder's features from the config, the tokenizer (``vocab.txt``,
``merges.txt``, ``tokenizer*.json``, ``special_tokens_map.json``, sentencepiece models, ...) and
the processor (``preprocessor_config.json``, ...) as much as from the weights, so a reference to a
model records them all (:func:`model_file_hashes`).
"""

from __future__ import annotations

import fnmatch
import os
import stat
from pathlib import Path

__all__ = ["model_file_hashes"]

#: Files of a model folder that decide nothing transformers computes: weights in formats laya-eval never
#: loads (safetensors files are hashed by :func:`laya_eval.models.backbones.hf.weight_file_hashes`) and documentation.
_NOT_READ = ("*.safetensors", "*.bin", "*.h5", "*.msgpack", "*.ckpt", "*.onnx", "*.pt", "*.pth", "*.ot",
             "*.md", "LICENSE*", "README*", ".*")


def model_file_hashes(path: str) -> dict[str, str]:
    """``{file name: sha256}`` of every other file of a model folder: the config, the tokenizer (vocab.txt,
    merges.txt, tokenizer*.json, special_tokens_map.json, *.model, …), the processor (preprocessor_config.json,
    …) and anything else transformers may read from it; {} for a Hub id. Only regular files (or links to
    them) are opened, so a FIFO in the folder cannot block the reader."""
    from laya_eval.output.files import file_sha256

    if not os.path.isdir(path):
        return {}
    out = {}
    for p in sorted(Path(path).iterdir()):
        if any(fnmatch.fnmatch(p.name, pattern) for pattern in _NOT_READ):
            continue
        try:
            regular = stat.S_ISREG(p.stat().st_mode)
        except OSError:
            continue
        if regular:
            out[p.name] = file_sha256(p)
    return out


