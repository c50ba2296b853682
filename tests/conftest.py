"""Shared fixtures: small real checkpoints trained on scikit-learn's bundled digits."""

from __future__ import annotations

import gc
import os

# First: HOME and every cache folder move into a temporary folder before torch or matplotlib load.
from tests.sandbox import pytest_configure, pytest_sessionfinish, pytest_unconfigure  # noqa: F401  (hooks)

import pytest

# Tests never reach a model hub: the MiniLM encoder is read from its installed package.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# torch and laya_eval are imported where used: the xdist controller, which runs no test, never loads them.

# Fewer, larger garbage collections. A worker holds torch, pandas, matplotlib and the test modules, and the figure
# and report tests allocate fast: with Python's defaults (700, 10, 10) the collections took 37 of a suite run's 500
# CPU-s, 32 of them in full collections, each walking that whole heap; with these thresholds 11 CPU-s (side by side,
# the suite 270 -> 246 s). A cycle now waits for 50,000 net allocations in the youngest generation (the oldest is
# still collected, after 10 collections of the middle one); the largest worker peaked at 1.41 against 1.15 GB.
gc.set_threshold(50_000, 20, 10)

HEAD_NAMES = ("lastlayer", "concat", "scalarmix", "laya")


@pytest.fixture(scope="session", autouse=True)
def _one_thread():
    """One intra-op thread per xdist worker (one worker per core), as LAYA_EVAL_THREADS pins the CLI: multi-threaded
    kernels may split a reduction by the batch's size or the machine's load, and the byte-identity tests compare
    runs at different batch sizes."""
    import torch

    torch.set_num_threads(int(os.environ.get("LAYA_EVAL_THREADS", "1")))


@pytest.fixture(scope="session")
def digits():
    """The digits splits: {'train', 'val', 'test'}."""
    from laya_eval.data import load_dataset

    return {s: load_dataset("digits", s) for s in ("train", "val", "test")}


def _trained(head: str, digits, widths=(64, 32, 16)):
    import torch

    from laya_eval.training.trainer import TrainOptions, build_model, train_in_place

    torch.manual_seed(0)
    model = build_model(
        "mlp",
        head,
        digits["train"],
        backbone_kwargs={"widths": list(widths)},
        head_kwargs={"d_star": 16, "scorer_hidden": 16}
        if head == "laya"
        else ({"d_star": 16} if head == "scalarmix" else {}),
        seed=0,
    )
    train_in_place(model, digits["train"], digits["val"], TrainOptions(epochs=4, seed=0, batch_size=64))
    return model


@pytest.fixture(scope="session")
def digits_models(digits):
    """One small trained MLP model per head (L = 3), keyed by head name."""
    return {h: _trained(h, digits) for h in HEAD_NAMES}


@pytest.fixture(scope="session")
def digits_checkpoints(digits_models, tmp_path_factory):
    """Each of :func:`digits_models` saved as a .pt checkpoint; {head: path}."""
    from laya_eval.loading.checkpoints import save_checkpoint

    root = tmp_path_factory.mktemp("ckpt")
    return {h: save_checkpoint(m, root / f"digits-{h}.pt") for h, m in digits_models.items()}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    """The reproduction tests train and evaluate small grids end to end through the sweep: ``slow``.

    Tests that share a module-scoped fixture (a trained model, a built site, a pruning run) go to one xdist
    worker as a group (``--dist loadgroup``), so the fixture is built once rather than once per worker; a test
    with its own ``xdist_group`` mark (the torchrun tests) keeps it. ``tryfirst``: the marks must be in place
    before xdist's worker hook reads them into the test ids.

    The groups and the slow tests go first. xdist hands out work units largest first (groups of several tests) and
    units of one test in this order, so a long single test (an installed plug-in, a documentation page run end to
    end) starts while the other worker still has work, instead of running alone at the end of the suite."""
    for item in items:
        if item.path.name == "test_reproduce.py":
            item.add_marker(pytest.mark.slow)
        if item.get_closest_marker("xdist_group") is None and _uses_module_fixture(item):
            item.add_marker(pytest.mark.xdist_group(f"module:{item.path.name}"))
    items.sort(key=_start_order)  # stable: the collection order is kept otherwise


def _start_order(item) -> int:
    """Groups first (a module's grouped tests stay together, so its fixtures are built once in a serial run too),
    then slow single tests, then the rest."""
    if item.get_closest_marker("xdist_group") is not None:
        return 0
    return 1 if item.get_closest_marker("slow") is not None else 2


def _uses_module_fixture(item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    return any(defs and defs[-1].scope == "module" for defs in info.name2fixturedefs.values())
