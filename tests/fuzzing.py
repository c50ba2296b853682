"""A seeded mutator over laya-eval's file formats and a runner that feeds each mutant to the CLI.

Shared by ``tests/test_fuzz.py`` (a few hundred mutants per run) and ``benchmarks/fuzz.py``
(thousands). Seed files are generated here, small and valid: ``.pt`` and ``.safetensors``
checkpoints, an ``.npz`` dataset, a Fashion-MNIST IDX ``.gz`` pair and a CIFAR-10 batch
with its meta file. Mutations are byte-level (bit flips, truncation, insertion, deletion,
duplication, header overwrites, huge integers) and structural (config edits and type
swaps, state-dict edits, safetensors metadata edits, array and label edits, planted
pickle payloads that would write a marker file if they ever ran).

Every mutant goes through ``laya-eval info`` (checkpoints), ``laya-eval faithfulness``
(checkpoints, and data files as ``--data``) in-process with click's CliRunner, and the
data loaders. Outcomes: ``exit0``, ``exit2``, ``traceback`` (any other exit or an
exception escaping), ``hang`` (past the per-case timeout) and ``marker`` (a planted
payload ran).
"""

from __future__ import annotations

import contextlib
import shutil
import signal
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.fuzz_mutations import (
    KINDS,
    MARKER,
    PlantedPayload,
    Seeds,
    make_seeds,
    mutants,
)


# --------------------------------------------------------------------------- running
class CaseTimeout(Exception):
    """A case ran past its time limit."""


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise :class:`CaseTimeout` in the main thread after ``seconds`` (SIGALRM)."""

    def on_alarm(signum, frame):
        raise CaseTimeout

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _cli(args: list[str]) -> tuple[str, str]:
    from click.testing import CliRunner
    from laya_eval_cli.main import cli

    result = CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=True)
    if isinstance(result.exception, CaseTimeout):
        return "hang", " ".join(args[:1])
    escaped = result.exception is not None and not isinstance(result.exception, SystemExit)
    if escaped or result.exit_code not in (0, 2) or "Traceback" in result.output:
        detail = repr(result.exception)[:200] if result.exception else result.output[-300:]
        return "traceback", f"{args[0]}: exit {result.exit_code}: {detail}"
    return f"exit{result.exit_code}", ""


def _loader(call: Callable[[], object]) -> tuple[str, str]:
    from laya_eval.errors import LayaEvalError

    try:
        call()
    except LayaEvalError:
        return "exit2", ""
    except CaseTimeout:
        return "hang", "loader"
    except Exception as exc:  # noqa: BLE001 - anything else is what the fuzzer looks for
        return "traceback", f"loader: {type(exc).__name__}: {str(exc)[:200]}"
    return "exit0", ""


_RANK = {"exit0": 0, "exit2": 1, "traceback": 2, "hang": 3, "marker": 4}
_FAITH = ["--limit", "4", "--methods", "contribution,random", "--bootstrap", "10", "--quiet", "--batch-size", "4"]


def run_mutant(kind: str, data: bytes, seeds: Seeds, work: Path, timeout: float = 20.0) -> tuple[str, str]:
    """Feed one mutant to every consumer; return the worst outcome and its detail."""
    from laya_eval.data import load_dataset

    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    out = work / "out"
    steps: list[Callable[[], tuple[str, str]]] = []
    if kind in ("pt", "safetensors"):
        path = work / f"ckpt.{kind}"
        path.write_bytes(data)
        steps = [
            lambda: _cli(["info", path]),
            lambda: _cli(["faithfulness", path, "--data", "digits", "--out", out, *_FAITH]),
        ]
    elif kind == "npz":
        path = work / "data.npz"
        path.write_bytes(data)
        steps = [
            lambda: _loader(lambda: load_dataset(f"npz:{path}")),
            lambda: _cli(["faithfulness", seeds.models["digits"], "--data", f"npz:{path}", "--out", out, *_FAITH]),
        ]
    elif kind in ("idx", "idx_raw"):
        suffix = ".gz" if kind == "idx" else ""
        (work / f"t10k-images-idx3-ubyte{suffix}").write_bytes(data)
        (work / "t10k-labels-idx1-ubyte.gz").write_bytes(seeds.extra["idx_labels"])
        steps = [
            lambda: _loader(lambda: load_dataset("fashion-mnist", "test", data_dir=work)),
            lambda: _cli(
                [
                    "faithfulness",
                    seeds.models["fmnist"],
                    "--data",
                    "fashion-mnist",
                    "--data-dir",
                    work,
                    "--out",
                    out,
                    *_FAITH,
                ]
            ),
        ]
    else:
        folder = work / "cifar-10-batches-py"
        folder.mkdir()
        (folder / "test_batch").write_bytes(data)
        (folder / "batches.meta").write_bytes(seeds.extra["cifar_meta"])
        steps = [
            lambda: _loader(lambda: load_dataset("cifar10", "test", data_dir=work)),
            lambda: _cli(
                ["faithfulness", seeds.models["cifar"], "--data", "cifar10", "--data-dir", work, "--out", out, *_FAITH]
            ),
        ]
    worst = ("exit0", "")
    for step in steps:
        try:
            with time_limit(timeout):
                got = step()
        except CaseTimeout:
            got = ("hang", "timeout")
        if _RANK[got[0]] > _RANK[worst[0]]:
            worst = got
    return worst


@dataclass
class FuzzReport:
    """Counts of one fuzzing run and the first failures (kind, mutation, detail)."""

    counts: Counter = field(default_factory=Counter)
    by_kind: Counter = field(default_factory=Counter)
    failures: list[tuple[int, str, str, str]] = field(default_factory=list)

    @property
    def n(self) -> int:
        return sum(self.counts.values())


def fuzz(n: int, seed: int, folder: Path, timeout: float = 20.0) -> FuzzReport:
    """Run ``n`` seeded mutants; planted payloads aim at ``folder / MARKER``."""
    seeds = make_seeds(folder / "seeds")
    marker = folder / MARKER
    report = FuzzReport()
    for i, kind, mutation, data in mutants(seeds, n, seed, str(marker)):
        outcome, detail = run_mutant(kind, data, seeds, folder / "case", timeout)
        if marker.exists():
            outcome, detail = "marker", "a planted payload ran"
            marker.unlink()
        report.counts[outcome] += 1
        report.by_kind[(kind, outcome)] += 1
        if outcome not in ("exit0", "exit2") and len(report.failures) < 20:
            report.failures.append((i, kind, mutation, detail))
    return report


__all__ = [
    "KINDS",
    "MARKER",
    "FuzzReport",
    "PlantedPayload",
    "Seeds",
    "fuzz",
    "make_seeds",
    "mutants",
    "run_mutant",
    "time_limit",
]
