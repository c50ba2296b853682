#!/usr/bin/env bash
# Screenshots of report.html and a docs page at 1280 and 390 px, from the browser checks of the test suite
# (tests/test_docs_site.py, headless Chromium), copied into benchmarks/results/browser/.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
LAYA_EVAL_BROWSER_SHOTS="$PWD/benchmarks/results/browser" LAYA_EVAL_THREADS=1 \
    "$PYTHON" -m pytest -q -p no:cacheprovider tests/test_docs_site.py -k "browser"
