"""A hostile corpus of checkpoints, each run through ``info`` and ``faithfulness`` in its own process.

Usage::

    python benchmarks/hostile_corpus.py --threads 1

Builds about 130 crafted files in these categories (code and network on a
checkpoint's word, configs of the wrong type or missing keys, state dicts of the wrong
shape, broken safetensors metadata, kilobyte inputs that ask for gigabytes, pickle
payloads, files that are not checkpoints, terminal escape sequences, bit flips and
truncations), then runs ``laya-eval info FILE`` and ``laya-eval faithfulness FILE
--data digits --limit 8 ...`` for each in a fresh subprocess with an empty working
folder and ``RLIMIT_AS`` of 8 GiB (a safety net: a run that needs it fails).

Per run it records the exit code, whether a traceback was printed, the peak RSS of
the process (``wait4``'s ``ru_maxrss``), the time, and whether code ran: a planted
payload's marker file, the Zen of Python on stdout (``import this``), or any new file
in the working folder other than the result folder. Writes ``hostile_corpus.csv`` and
``hostile_corpus.md`` into ``--out`` (default ``benchmarks/results``).
"""

from __future__ import annotations

import argparse
import csv
import datetime
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "cli")]
RSS_LIMIT_MB = 1024
_CLI = "import sys; from laya_eval_cli.main import cli; sys.argv[0] = 'laya-eval'; cli()"


from hostile_cases import build_corpus  # noqa: E402 (after sys.path names the benchmarks folder)


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))


def run_one(args: list[str], cwd: Path, env: dict, timeout: float) -> dict:
    """Run ``laya-eval ARGS`` in a fresh process; exit code, output, its own peak RSS (MB), seconds."""
    start = time.perf_counter()
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(
            [sys.executable, "-c", _CLI, *args],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=_limit_memory,  # noqa: PLW1509 - this script starts no threads
        )
        hung = False
        while True:  # wait4 on this pid alone: ru_maxrss is this process's peak, not the maximum of all children
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() - start > timeout:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                hung = True
                break
            time.sleep(0.02)
        proc.returncode = os.waitstatus_to_exitcode(status)
        log.seek(0)
        out = log.read().decode("utf-8", "replace")
    return {
        "exit": "hang" if hung else proc.returncode,
        "output": out,
        "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
        "seconds": round(time.perf_counter() - start, 2),
    }


_EVIL_MODULE = "open({marker!r}, 'w').write('imported from the working folder')\n"
_ZEN = "Beautiful is better than ugly"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--only", default=None, help="Run only files whose name contains this text.")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args()
    env = dict(
        os.environ, LAYA_EVAL_THREADS=str(args.threads), PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "cli")])
    )
    rows, started = [], time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="laya-hostile-") as tmp:
        root = Path(tmp)
        marker = root / "MARKER-code-ran"
        corpus = build_corpus(root, marker)
        for name, category, data in corpus:
            if args.only and args.only not in name:
                continue
            path = root / "corpus" / name
            path.parent.mkdir(exist_ok=True)
            path.write_bytes(data)
            for command in ("info", "faithfulness"):
                cwd = root / "cwd"
                shutil.rmtree(cwd, ignore_errors=True)
                cwd.mkdir()
                (cwd / "corpus_evil.py").write_text(_EVIL_MODULE.format(marker=str(marker)))
                cli_args = (
                    ["info", str(path)]
                    if command == "info"
                    else [
                        "faithfulness",
                        str(path),
                        "--data",
                        "digits",
                        "--limit",
                        "8",
                        "--methods",
                        "contribution,random",
                        "--bootstrap",
                        "10",
                        "--out",
                        "out",
                        "--quiet",
                    ]
                )
                res = run_one(cli_args, cwd, env, args.timeout)
                stray = sorted(set(os.listdir(cwd)) - {"corpus_evil.py", "out"})
                ran = [
                    why
                    for why, hit in (
                        ("marker file", marker.exists()),
                        ("import this", _ZEN in res["output"]),
                        (f"new files {stray}", bool(stray)),
                    )
                    if hit
                ]
                marker.unlink(missing_ok=True)
                lines = [line for line in res["output"].splitlines() if line.strip()]
                rows.append(
                    {
                        "file": name,
                        "category": category,
                        "bytes": len(data),
                        "command": command,
                        "exit": res["exit"],
                        "traceback": "Traceback" in res["output"],
                        "code_ran": "; ".join(ran),
                        "peak_rss_mb": res["peak_rss_mb"],
                        "seconds": res["seconds"],
                        "last_line": (lines[-1] if lines else "")[:160].encode("unicode_escape").decode(),
                    }
                )
                print(
                    f"{name:<40} {command:<13} exit {res['exit']!s:<5} rss {res['peak_rss_mb']:>7.1f} MB "
                    f"{'TRACEBACK ' if rows[-1]['traceback'] else ''}{'CODE RAN: ' + rows[-1]['code_ran'] if ran else ''}",
                    flush=True,
                )
    write_results(rows, args, time.perf_counter() - started, len(corpus))
    bad = [
        r
        for r in rows
        if r["traceback"] or r["code_ran"] or r["exit"] not in (0, 2) or r["peak_rss_mb"] >= RSS_LIMIT_MB
    ]
    return 1 if bad else 0


def write_results(rows: list[dict], args, seconds: float, n_files: int) -> None:
    """``hostile_corpus.csv`` (one row per file and command) and ``hostile_corpus.md`` (summary)."""
    import torch

    args.out.mkdir(parents=True, exist_ok=True)
    with open(args.out / "hostile_corpus.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    command = (
        "python benchmarks/hostile_corpus.py --threads "
        + str(args.threads)
        + (f" --only {args.only}" if args.only else "")
    )
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    by_cat: dict[str, list[dict]] = {}
    for r in rows:
        by_cat.setdefault(r["category"], []).append(r)
    lines = [
        f"# Hostile corpus: {n_files} files x (info, faithfulness)",
        "",
        f"Generated by `{command}` on {date} ({seconds / 60:.1f} min).",
        "",
        (
            f"Machine: {os.cpu_count()} CPU cores, Python {platform.python_version()}, torch {torch.__version__}; "
            "each run in its own process (RLIMIT_AS 8 GiB), peak RSS from wait4."
        ),
        "",
        "| category | runs | exit 0 | exit 2 | other exit | tracebacks | code ran | max peak RSS (MB) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for cat, rs in [*by_cat.items(), ("**all**", rows)]:
        lines.append(
            f"| {cat} | {len(rs)} | {sum(r['exit'] == 0 for r in rs)} | {sum(r['exit'] == 2 for r in rs)} | "
            f"{sum(r['exit'] not in (0, 2) for r in rs)} | {sum(r['traceback'] for r in rs)} | "
            f"{sum(bool(r['code_ran']) for r in rs)} | {max(r['peak_rss_mb'] for r in rs):.0f} |"
        )
    bad = [r for r in rows if r["traceback"] or r["code_ran"] or r["exit"] not in (0, 2)]
    if bad:
        lines += ["", "Runs that broke a promise:", ""]
        lines += [
            f"- `{r['file']}` {r['command']}: exit {r['exit']}, code ran: {r['code_ran'] or 'no'}; "
            f"`{r['last_line'][:120]}`"
            for r in bad
        ]
    lines += ["", "Per-run rows (exit, peak RSS, last output line): `hostile_corpus.csv`."]
    (args.out / "hostile_corpus.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
