"""Which laya-eval source files a reader opens following one command: every file of ``laya_eval/`` and ``cli/``
that holds a function the command runs, in the order first entered.

Module and class bodies run at import are not counted (a reader does not follow an import into a file it never
calls; which imports happen inside the run depends on what was imported before it), functions they call at import
are. Writes ``benchmarks/results/main_job_files.md``.

    python benchmarks/main_job_files.py            # trains a digits LAYA checkpoint, follows `faithfulness`
"""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ROOTS = (str(ROOT / "laya_eval"), str(ROOT / "cli"))


def follow(argv: list[str]) -> list[str]:
    """The files entered, in order, while ``laya-eval ARGV`` runs in this process."""
    seen: list[str] = []

    def profile(frame, event, arg):
        if event != "call" or not frame.f_code.co_flags & inspect.CO_OPTIMIZED:  # module and class bodies
            return
        name = frame.f_code.co_filename
        if name.startswith(ROOTS) and name not in seen:
            seen.append(name)

    from laya_eval_cli.main import cli

    sys.setprofile(profile)
    try:
        cli.main(argv, prog_name="laya-eval")
    except SystemExit as exc:  # the CLI's error boundary always exits
        if exc.code:
            raise
    finally:
        sys.setprofile(None)
    return [os.path.relpath(f, ROOT) for f in seen]


def main() -> None:
    os.environ.setdefault("LAYA_EVAL_THREADS", "1")
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = Path(tmp) / "digits-laya.pt"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "laya_eval_cli.main",
                "train",
                "--dataset",
                "digits",
                "--backbone",
                "mlp",
                "--head",
                "laya",
                "--seed",
                "0",
                "--out",
                str(ckpt),
            ],
            check=True,
            capture_output=True,
        )
        files = follow(["faithfulness", str(ckpt), "--out", str(Path(tmp) / "out"), "-q"])
    lines = [
        "# Files followed by `laya-eval faithfulness CKPT`",
        "",
        "Every source file holding a function that `laya-eval faithfulness` runs on a digits LAYA checkpoint "
        "(`python benchmarks/main_job_files.py`), in the order first entered.",
        "",
        f"**{len(files)} files.**",
        "",
    ] + [f"{i}. `{f}`" for i, f in enumerate(files, 1)]
    out = ROOT / "benchmarks" / "results" / "main_job_files.md"
    out.write_text("\n".join(lines) + "\n")
    print(f"{len(files)} files -> {out}")


if __name__ == "__main__":
    main()
