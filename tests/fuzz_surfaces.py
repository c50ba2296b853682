"""Feed seeded mutants of the newest surfaces to the real CLI and classify what happens.

Shared by ``tests/test_fuzz_surfaces.py`` (a handful per surface) and ``benchmarks/fuzz_surfaces.py`` (thousands).
The surfaces and their mutations are in ``tests/fuzz_surface_seeds.py``; each mutant runs through one command:

- ``sweep``: ``laya-eval sweep CONFIG --out DIR -q`` (a config that passes runs its one tiny cell);
- ``keras``: ``laya-eval import-keras FILE --input-shape 6 --out OUT.pt``;
- ``cache``: ``laya-eval fit-head --model py:tiny.py:make --cache-dir CACHE ...`` on a copy of the cache ``fit-head``
  wrote, with one ``meta.json`` (or the layer-size record) damaged;
- ``py``: ``laya-eval fit-head --model py:m.py:make ...`` on a damaged or failing module or spec, and now and then
  ``faithfulness`` / ``info`` on a checkpoint whose backbone is a ``py:`` reference, without ``--trust-code``.

Outcomes: ``exit0``; ``exit2`` (exactly one ``Error:`` line, no traceback); ``unclear`` (exit 2 but the error is not
one line); ``traceback`` (any other exit, an escaping exception or a traceback printed); ``hang`` (past the time
limit); ``code`` (the marker file a mutant's module writes at import appeared where no ``--trust-code`` allowed it).
In-process runs use click's CliRunner; ``subprocess_every`` sends every n-th mutant also through a fresh
``python -m laya_eval_cli.main`` with a wall-clock timeout, where a hang cannot hide behind an alarm.
"""

from __future__ import annotations

import io
import os
import random
import shutil
import subprocess
import sys
import zipfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from tests import fuzz_surface_seeds as seeds
from tests.fuzzing import CaseTimeout, time_limit

SURFACES = ("sweep", "keras", "cache", "py")
OUTCOMES = ("exit0", "exit2", "unclear", "traceback", "hang", "code")
_RANK = {o: i for i, o in enumerate(OUTCOMES)}
ROOT = Path(__file__).resolve().parents[1]
FIT = ["--data", "digits", "--epochs", "1", "--limit", "64", "--batch-size", "32", "-q"]


@dataclass
class Case:
    """One mutant: the surface, what was done, and the CLI arguments (after ``--threads 1``) that read it."""

    surface: str
    mutation: str
    args: list[str]
    trusted: bool = False  # the command itself passes --trust-code or names the py: spec: code may run


def classify(exit_code: int, output: str, exception: BaseException | None = None) -> str:
    """The outcome of one CLI run (see the module docstring)."""
    if isinstance(exception, CaseTimeout):
        return "hang"
    if (exception is not None and not isinstance(exception, SystemExit)) or "Traceback" in output:
        return "traceback"
    if exit_code == 0:
        return "exit0"
    if exit_code != 2:
        return "traceback"
    lines = [line for line in output.splitlines() if line.strip() and not line.lstrip().startswith("Warning")]
    errors = [line for line in lines if line.startswith("Error: ")]
    return "exit2" if len(errors) == 1 and lines[-1] == errors[0] else "unclear"


def run_in_process(args: list[str], timeout: float) -> tuple[str, str]:
    from click.testing import CliRunner
    from laya_eval_cli.main import cli

    try:
        with time_limit(timeout):
            result = CliRunner().invoke(cli, ["--threads", "1", *args], catch_exceptions=True)
    except CaseTimeout:
        return "hang", "timeout"
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001 - CliRunner lets a BaseException that is no Exception through
        return "traceback", f"escaped: {type(exc).__name__}: {str(exc)[:200]}"
    outcome = classify(result.exit_code, result.output, result.exception)
    detail = (
        ""
        if outcome in ("exit0", "exit2")
        else f"exit {result.exit_code}: {result.exception!r:.160} {result.output[-300:]}"
    )
    return outcome, detail


def run_subprocess(args: list[str], timeout: float) -> tuple[str, str]:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'cli'}"}
    try:
        done = subprocess.run(
            [sys.executable, "-m", "laya_eval_cli.main", "--threads", "1", *args],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
            env=env,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return "hang", f"subprocess past {timeout:g} s"
    outcome = classify(done.returncode, done.stdout + done.stderr)
    return outcome, "" if outcome in ("exit0", "exit2") else f"subprocess exit {done.returncode}: {done.stderr[-300:]}"


# --------------------------------------------------------------------------- seeds on disk
@dataclass
class Seeds:
    folder: Path
    paths: dict[str, Path]
    keras_layers: list
    keras_config: dict


def make_seeds(folder: Path) -> Seeds:
    """Write the seed files: modules, the special files, a Keras pair, a cache filled by ``fit-head``, a
    checkpoint whose backbone is a ``py:`` reference to a module that writes the marker."""
    import numpy as np

    from tests.test_keras_import import _config, tiny_layers

    folder.mkdir(parents=True, exist_ok=True)
    marker = folder / seeds.MARKER
    paths = {"marker": marker, "folder": folder / "a-folder", "fifo": folder / "a-fifo", "huge": folder / "huge.py"}
    paths["folder"].mkdir(exist_ok=True)
    if not paths["fifo"].exists():
        os.mkfifo(paths["fifo"])
    paths["huge"].write_text("# padding\n" * 200_000)
    paths["tiny"] = folder / "tiny.py"
    paths["tiny"].write_text(seeds.PY_SEED)
    paths["evil"] = folder / "evil_model.py"
    paths["evil"].write_text(seeds.EVIL_SOURCE.format(marker=str(marker)))
    paths["cache"] = folder / "cache"
    paths["evil_ckpt"] = folder / "evil.pt"
    for spec, out in ((paths["tiny"], folder / "tiny.pt"), (paths["evil"], paths["evil_ckpt"])):
        args = ["fit-head", "--model", f"py:{spec}:make", "--layers", "0,2", "--out", out, *FIT]
        outcome, detail = run_in_process([str(a) for a in [*args, "--cache-dir", paths["cache"]]], 600)
        if outcome != "exit0":
            raise RuntimeError(f"a seed run failed: {detail}")
    marker.unlink()
    shutil.rmtree(paths["cache"])  # keep only the tiny model's entries
    args = ["fit-head", "--model", f"py:{paths['tiny']}:make", "--layers", "0,2", "--out", folder / "tiny.pt", *FIT]
    run_in_process([str(a) for a in [*args, "--cache-dir", paths["cache"]]], 600)
    return Seeds(folder, paths, tiny_layers(np.random.default_rng(1)), _config())


# --------------------------------------------------------------------------- one case per surface
def _h5_bytes(layers, work: Path) -> bytes:
    from tests.test_keras_import import write_weights

    return write_weights(work / "w.tmp.h5", layers).read_bytes()


def _keras_case(rng: random.Random, s: Seeds, work: Path) -> Case:
    edits = seeds.keras_edits()
    layers, config = s.keras_layers, s.keras_config
    members = {"metadata.json": b'{"keras_version": "3.15.1"}', "config.json": None, "model.weights.h5": None}
    compression, r = zipfile.ZIP_STORED, rng.random()
    what = "valid"
    if rng.random() < 0.35:  # a .weights.h5 file
        name = rng.choice(sorted(edits))
        data = _h5_bytes(edits[name](rng, layers) if r < 0.5 else layers, work)
        what = f"h5:{name}" if r < 0.5 else "h5:bytes"
        if r >= 0.5:
            mutation, data = seeds.byte_mutation(rng, data)
            what = f"h5:bytes:{mutation}"
        path = work / "model.weights.h5"
        path.write_bytes(data)
        return Case("keras", what, ["import-keras", str(path), "--input-shape", "6", "--out", str(work / "o.pt")])
    weights = _h5_bytes(layers, work)
    text = None
    if r < 0.15:
        what, config = "config:type_swap", seeds.edit_tree(rng, config, ("class_name", "config", "module", "tau"))
    elif r < 0.25:
        what = rng.choice(["config:deep", "config:long", "config:bytes", "metadata:swap"])
        plain = seeds.json_text(config)
        text = {
            "config:deep": lambda: plain.replace('"layers": [', f'"layers": [{seeds.deep(rng)}, ', 1),
            "config:long": lambda: plain.replace('"dense_1"', seeds.long_string(rng), 1),
            "config:bytes": lambda: seeds.byte_mutation(rng, plain.encode())[1].decode("latin-1"),
            "metadata:swap": lambda: plain,
        }[what]()
        if what == "metadata:swap":
            members["metadata.json"] = seeds.json_text(seeds.edit_tree(rng, {"keras_version": "3.15.1"})).encode()
    elif r < 0.45:
        name = rng.choice(sorted(edits))
        what, weights = f"weights:{name}", _h5_bytes(edits[name](rng, layers), work)
    elif r < 0.55:
        mutation, weights = seeds.byte_mutation(rng, weights)
        what = f"weights:bytes:{mutation}"
    elif r < 0.75:
        what = rng.choice(["zip:deflated", "zip:drop", "zip:extra", "zip:bomb", "zip:duplicate", "zip:bzip2"])
    members["config.json"] = (text if text is not None else seeds.json_text(config)).encode("utf-8", "replace")
    members["model.weights.h5"] = weights
    if what == "zip:deflated":
        compression = zipfile.ZIP_DEFLATED
    elif what == "zip:bzip2":
        compression = zipfile.ZIP_BZIP2
    elif what == "zip:drop":
        members.pop(rng.choice(sorted(members)))
    elif what == "zip:bomb":  # a weights member of 64 MiB of zeros, deflated to 64 KiB
        members["model.weights.h5"] = b"\0" * (64 << 20)
        compression = zipfile.ZIP_DEFLATED
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=compression) as z:
        for name, data in members.items():
            z.writestr(name, data)
        if what == "zip:extra":
            z.writestr("assets/" + "x" * rng.choice([10, 300]), b"\0" * 1000)
        elif what == "zip:duplicate":
            z.writestr("config.json", b"{}")
    data = buf.getvalue()
    if r >= 0.75:
        mutation, data = seeds.byte_mutation(rng, data)
        what = f"archive:bytes:{mutation}"
    path = work / "model.keras"
    path.write_bytes(data)
    return Case("keras", what, ["import-keras", str(path), "--input-shape", "6", "--out", str(work / "o.pt")])


def _sweep_case(rng: random.Random, s: Seeds, work: Path) -> Case:
    what, data = seeds.sweep_mutant(rng, s.paths)
    path = work / "sweep.toml"
    if rng.random() < 0.02:  # the config path itself is a special file
        what = f"config-file:{rng.choice(['fifo', 'zero', 'folder', 'huge'])}"
        path = {
            "config-file:fifo": s.paths["fifo"],
            "config-file:zero": Path("/dev/zero"),
            "config-file:folder": s.paths["folder"],
            "config-file:huge": s.paths["huge"],
        }[what]
    else:
        path.write_bytes(data)
    return Case("sweep", what, ["sweep", str(path), "--out", str(work / "out"), "-q"])


def _cache_case(rng: random.Random, s: Seeds, work: Path) -> Case:
    cache = work / "cache"
    shutil.copytree(s.paths["cache"], cache, symlinks=True)
    targets = sorted(cache.glob("*/meta.json")) + sorted(cache.glob("layer-dims/*.json"))
    target = rng.choice(targets)
    r = rng.random()
    import json

    if r < 0.3:
        mutation, data = seeds.byte_mutation(rng, target.read_bytes())
        what = f"bytes:{mutation}"
        target.write_bytes(data)
    elif r < 0.6:
        tree = json.loads(target.read_text())
        target.write_text(seeds.json_text(seeds.edit_tree(rng, tree, ("layer_dims", "arrays", "format", "key", "n"))))
        what = "type_swap"
    elif r < 0.8:
        tree = json.loads(target.read_text())
        huge = rng.choice([10**12, 2**62, 2**31, 10**9])
        if isinstance(tree, dict) and "arrays" in tree:
            record = tree["arrays"][rng.choice(sorted(tree["arrays"]))]
            record["shape"] = [record["shape"][0], huge] if rng.random() < 0.7 else [huge]
        else:
            tree = [huge, huge] if isinstance(tree, list) else tree
        target.write_text(seeds.json_text(tree))
        what = "huge_size"
    elif r < 0.9:
        what = rng.choice(["deep", "long"])
        target.write_text(seeds.deep(rng) if what == "deep" else '{"key": ' + seeds.long_string(rng) + "}")
    else:
        what = rng.choice(["fifo", "folder", "zero", "delete"])
        target.unlink()
        if what == "fifo":
            os.mkfifo(target)
        elif what == "folder":
            target.mkdir()
        elif what == "zero":
            target.symlink_to("/dev/zero")
    what = f"{'layer-dims' if target.parent.name == 'layer-dims' else 'meta'}:{what}"
    spec = f"py:{s.paths['tiny']}:make"
    args = ["fit-head", "--model", spec, "--layers", "0,2", "--out", str(work / "o.pt"), "--cache-dir", str(cache)]
    return Case("cache", what, [*args, *FIT], trusted=True)


def _py_case(rng: random.Random, s: Seeds, work: Path) -> Case:
    if rng.random() < 0.06:  # a checkpoint with a py: reference, read without --trust-code: must import nothing
        ckpt = str(s.paths["evil_ckpt"])
        args = rng.choice(
            [["info", ckpt], ["faithfulness", ckpt, "--data", "digits", "--limit", "4", "--out", str(work / "f")]]
        )
        return Case("py", f"untrusted-checkpoint:{args[0]}", args)
    what, spec, source, layers = seeds.py_mutant(rng)
    module = work / "m.py"
    module.write_bytes(source)
    special = {"FOLDER": s.paths["folder"], "FIFO": s.paths["fifo"], "HUGE": s.paths["huge"]}
    for name, path in special.items():
        spec = spec.replace(f"{name}:", f"{path}:")
    if not spec.startswith(("/", ":", "os:", "m:", "\x00")):
        spec = f"{work}/{spec}"
    args = ["fit-head", "--model", f"py:{spec}", "--layers", layers, "--out", str(work / "o.pt")]
    return Case("py", what, [*args, "--cache-dir", str(work / "cache"), *FIT], trusted=True)


MAKERS = {"sweep": _sweep_case, "keras": _keras_case, "cache": _cache_case, "py": _py_case}


# --------------------------------------------------------------------------- the run
@dataclass
class SurfaceReport:
    """Counts per outcome and per (surface, outcome), the first failures, and the subprocess sample's counts."""

    counts: Counter = field(default_factory=Counter)
    by_surface: Counter = field(default_factory=Counter)
    by_mutation: Counter = field(default_factory=Counter)
    subprocess: Counter = field(default_factory=Counter)
    failures: list = field(default_factory=list)

    @property
    def n(self) -> int:
        return sum(self.counts.values())

    def add(self, case: Case, outcome: str, detail: str, i: int) -> None:
        self.counts[outcome] += 1
        self.by_surface[(case.surface, outcome)] += 1
        self.by_mutation[(case.surface, case.mutation.split(":")[0], outcome)] += 1
        if outcome not in ("exit0", "exit2") and len(self.failures) < 40:
            self.failures.append((i, case.surface, case.mutation, detail[:400]))


def run_case(case: Case, s: Seeds, timeout: float, in_subprocess: bool = False) -> tuple[str, str]:
    """Run one case and return its worst outcome (a marker file written without trust is ``code``)."""
    marker = s.paths["marker"]
    marker.unlink(missing_ok=True)
    for name in [m for m in sys.modules if m.startswith("laya_eval_user_")]:  # imported afresh: a run is seen
        del sys.modules[name]
    outcome, detail = (run_subprocess if in_subprocess else run_in_process)(case.args, timeout)
    if marker.exists():
        marker.unlink()
        if not case.trusted:
            return "code", "a module named by the input was imported without --trust-code"
    return outcome, detail


def fuzz_surfaces(
    counts: dict[str, int],
    seed: int,
    folder: Path,
    timeout: float = 60.0,
    subprocess_every: int = 0,
    subprocess_timeout: float = 120.0,
) -> SurfaceReport:
    """Run ``counts[surface]`` seeded mutants of each surface (interleaved); every ``subprocess_every``-th case runs
    in a fresh process too."""
    s = make_seeds(folder / "seeds")
    rng = random.Random(seed)
    report = SurfaceReport()
    order = [name for name in SURFACES for _ in range(counts.get(name, 0))]
    random.Random(seed + 1).shuffle(order)
    for i, surface in enumerate(order):
        work = folder / "case"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        case = MAKERS[surface](rng, s, work)
        outcome, detail = run_case(case, s, timeout)
        # (an argument with a NUL byte cannot reach a process: such a case runs in-process only)
        if subprocess_every and i % subprocess_every == 0 and not any("\0" in a for a in case.args):
            shutil.rmtree(work / "out", ignore_errors=True)
            got, why = run_case(case, s, subprocess_timeout, in_subprocess=True)
            report.subprocess[(surface, got)] += 1
            if _RANK[got] > _RANK[outcome]:
                outcome, detail = got, why
        report.add(case, outcome, detail, i)
    return report


__all__ = ["OUTCOMES", "SURFACES", "Case", "SurfaceReport", "classify", "fuzz_surfaces", "make_seeds", "run_case"]
