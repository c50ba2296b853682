"""Shared fixtures (small real checkpoints trained on scikit-learn's bundled digits) and the suite's sandbox.

The sandbox: before anything imports torch, matplotlib or transformers, HOME and every cache and config
folder a library here writes to point into one temporary folder per test process (inherited by the
subprocesses tests start), so the suite never writes into the user's home. At the end of the session the
user's real cache and config folders are compared with their state at the start; a new file there fails the
run.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

REAL_HOME = Path(os.environ.get("HOME") or Path.home())
SANDBOX = Path(tempfile.mkdtemp(prefix="laya-eval-tests-"))
SANDBOX_VARIABLES = {
    "HOME": "home", "XDG_CACHE_HOME": "home/.cache", "XDG_CONFIG_HOME": "home/.config",
    "XDG_DATA_HOME": "home/.local/share", "XDG_STATE_HOME": "home/.local/state", "MPLCONFIGDIR": "matplotlib",
    "LAYA_EVAL_CACHE": "laya-eval-cache", "HF_HOME": "huggingface", "TORCH_HOME": "torch",
    "IPYTHONDIR": "ipython", "JUPYTER_CONFIG_DIR": "jupyter/config", "JUPYTER_DATA_DIR": "jupyter/data",
    "JUPYTER_RUNTIME_DIR": "jupyter/runtime",
}
for _var, _sub in SANDBOX_VARIABLES.items():
    (SANDBOX / _sub).mkdir(parents=True, exist_ok=True)
    os.environ[_var] = str(SANDBOX / _sub)
os.environ["PYTHONDONTWRITEBYTECODE"] = "1"
# Tests never reach a model hub: the MiniLM encoder is read from its installed package.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# The folders of the real home that laya-eval and the libraries the suite runs would write to (not all of
# ~/.cache: other programs on a developer's machine may write there while the suite runs).
WATCHED = [REAL_HOME / d for d in (".cache/laya-eval", ".cache/matplotlib", ".cache/huggingface", ".cache/torch",
                                   ".config/matplotlib", ".matplotlib", ".ipython", ".jupyter",
                                   ".local/share/jupyter")]


def _listing(folders) -> set[str]:
    found = set()
    for folder in folders:
        for root, dirs, files in os.walk(folder):
            found.update(os.path.join(root, name) for name in dirs + files)
    return found


_BEFORE = _listing(WATCHED)

import pytest  # noqa: E402
import torch  # noqa: E402
from hypothesis import settings  # noqa: E402

settings.register_profile("sandbox", database=None)  # no .hypothesis folder in the repository
settings.load_profile("sandbox")


def new_files_in_real_home() -> list[str]:
    """Files and folders that appeared in the real home's cache and config folders since the session began."""
    return sorted(_listing(WATCHED) - _BEFORE)


def pytest_sessionfinish(session, exitstatus):
    created = new_files_in_real_home()
    if created and not hasattr(session.config, "workerinput"):  # the controller (or a plain run) checks once
        session.config.pluginmanager.get_plugin("terminalreporter").write_line(
            f"the suite wrote into the real home {REAL_HOME}: {created[:5]}", red=True)
        session.exitstatus = 1
    shutil.rmtree(SANDBOX, ignore_errors=True)


from laya_eval.data import load_dataset  # noqa: E402
from laya_eval.loading.checkpoints import save_checkpoint  # noqa: E402
from laya_eval.training.trainer import TrainOptions, build_model, train  # noqa: E402

HEAD_NAMES = ("lastlayer", "concat", "scalarmix", "laya")


@pytest.fixture(scope="session")
def digits():
    """The digits splits: {'train', 'val', 'test'}."""
    return {s: load_dataset("digits", s) for s in ("train", "val", "test")}


def _trained(head: str, digits, widths=(64, 32, 16)):
    torch.manual_seed(0)
    model = build_model("mlp", head, digits["train"], backbone_kwargs={"widths": list(widths)},
                        head_kwargs={"d_star": 16, "scorer_hidden": 16} if head == "laya" else
                        ({"d_star": 16} if head == "scalarmix" else {}), seed=0)
    train(model, digits["train"], digits["val"], TrainOptions(epochs=4, seed=0, batch_size=64))
    return model


@pytest.fixture(scope="session")
def digits_models(digits):
    """One small trained MLP model per head (L = 3), keyed by head name."""
    return {h: _trained(h, digits) for h in HEAD_NAMES}


@pytest.fixture(scope="session")
def digits_checkpoints(digits_models, tmp_path_factory):
    """Each of :func:`digits_models` saved as a .pt checkpoint; {head: path}."""
    root = tmp_path_factory.mktemp("ckpt")
    return {h: save_checkpoint(m, root / f"digits-{h}.pt") for h, m in digits_models.items()}
