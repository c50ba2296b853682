"""Public names do not flip between module and function depending on import order."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import laya_eval

_CHECK = """
import types, laya_eval
{before}
assert isinstance(laya_eval.trace, types.ModuleType), laya_eval.trace
assert isinstance(laya_eval.evaluate, types.ModuleType), laya_eval.evaluate
assert callable(laya_eval.trace.trace) and callable(laya_eval.evaluate.evaluate)
import laya_eval.trace, laya_eval.evaluate
assert isinstance(laya_eval.trace, types.ModuleType) and isinstance(laya_eval.evaluate, types.ModuleType)
print("ok")
"""


def test_no_export_shadows_a_submodule():
    clashes = [name for name in laya_eval._EXPORTS if importlib.util.find_spec(f"laya_eval.{name}") is not None]
    assert clashes == []


def test_trace_and_evaluate_are_modules_in_any_import_order():
    # a fresh process each: the import order is what is tested
    for before in ("", "laya_eval.load_checkpoint", "from laya_eval.evaluate import evaluate",
                   "from laya_eval.trace import trace", "import laya_eval.attribution"):
        proc = subprocess.run([sys.executable, "-c", _CHECK.format(before=before)], capture_output=True, text=True)
        assert proc.returncode == 0 and proc.stdout.strip() == "ok", (before, proc.stderr[-500:])


def test_readme_lower_level_call_works():
    import torch

    backbone = laya_eval.make_backbone("mlp", in_features=6, widths=[4, 3])
    model = laya_eval.LayeredModel(backbone, laya_eval.make_head("laya", backbone.layer_dims, 5, d_star=2))
    x = torch.randn(4, 6)
    tr = laya_eval.trace.trace(model, x)
    with torch.no_grad():
        torch.testing.assert_close(tr.logits, model(x))
