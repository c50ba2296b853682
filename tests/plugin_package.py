"""A plug-in package written into a temporary folder: one method and one ablation, registered through the
public path (``laya_eval.register_method`` / ``laya_eval.register_ablation``), with an entry point and a
standard-library build backend (so installing it needs no build tool)."""

from __future__ import annotations

import textwrap
from pathlib import Path

MODULE = "laya_plugin_example"

#: The plug-in's module. At import it writes the file named by $LAYA_EVAL_PLUGIN_MARKER (if set), so a test
#: can tell whether laya-eval imported it.
SOURCE = textwrap.dedent('''
    """Example laya-eval plug-in: method ``state_norm`` and ablation ``ones``."""
    import os
    from pathlib import Path

    import torch

    import laya_eval

    if os.environ.get("LAYA_EVAL_PLUGIN_MARKER"):
        Path(os.environ["LAYA_EVAL_PLUGIN_MARKER"]).write_text("imported")


    def state_norm(trace, model, *, target, context):
        """L2 norm of each layer's pooled state, (B, L)."""
        return torch.stack([laya_eval.pool_hidden(h).flatten(1).norm(dim=1) for h in trace.hidden], 1)


    def ones_head(trace, head, masks, fill):
        pooled = [laya_eval.pool_hidden(h) for h in trace.hidden]
        return head.removal_logits(pooled, masks, [p.new_ones(p.shape[-1]) for p in pooled])


    def ones_network(trace, model, masks, fill, *, max_rows=None):
        one = torch.ones((), dtype=masks.dtype, device=masks.device)
        return laya_eval.network_replacement_logits(trace, model, masks, [one] * masks.shape[-1], max_rows)


    def ones_state(state, layer, fill):
        return torch.ones_like(state)


    laya_eval.register_method(laya_eval.MethodSpec("state_norm", "L2 norm of each layer's pooled state."),
                              state_norm)
    laya_eval.register_ablation(laya_eval.AblationSpec("ones", "Replace the layer's state with ones."),
                                head=ones_head, network=ones_network, removed_state=ones_state)
''')

PYPROJECT = textwrap.dedent(f'''
    [build-system]
    requires = []
    build-backend = "wheel_backend"
    backend-path = ["."]

    [project]
    name = "laya-plugin-example"
    version = "0.1.0"

    [project.entry-points."laya_eval.plugins"]
    example = "{MODULE}"
''')

#: A PEP 517 build backend of a few lines (the standard library only), so that installing the package needs no
#: build tool: a wheel holding the module and the entry point.
BACKEND = textwrap.dedent(f'''
    import base64, hashlib, zipfile
    from pathlib import Path

    NAME, VERSION, MODULE = "laya_plugin_example", "0.1.0", "{MODULE}"
    DIST = f"{{NAME}}-{{VERSION}}.dist-info"
    FILES = {{
        f"{{MODULE}}.py": Path(f"{{MODULE}}.py").read_bytes(),
        f"{{DIST}}/METADATA": b"Metadata-Version: 2.1\\nName: laya-plugin-example\\nVersion: 0.1.0\\n",
        f"{{DIST}}/WHEEL": b"Wheel-Version: 1.0\\nGenerator: wheel_backend\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n",
        f"{{DIST}}/entry_points.txt": f"[laya_eval.plugins]\\nexample = {{MODULE}}\\n".encode(),
    }}


    def _digest(data):
        return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


    def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
        name = f"{{NAME}}-{{VERSION}}-py3-none-any.whl"
        record = "".join(f"{{k}},{{_digest(v)}},{{len(v)}}\\n" for k, v in FILES.items()) + f"{{DIST}}/RECORD,,\\n"
        with zipfile.ZipFile(Path(wheel_directory) / name, "w") as wheel:
            for key, data in FILES.items():
                wheel.writestr(key, data)
            wheel.writestr(f"{{DIST}}/RECORD", record)
        return name
''')


def write_module(folder: Path) -> Path:
    """The plug-in module alone, ``folder/laya_plugin_example.py``."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{MODULE}.py"
    path.write_text(SOURCE)
    return path


def write_package(folder: Path) -> Path:
    """The installable package: the module and a pyproject declaring the ``laya_eval.plugins`` entry point."""
    write_module(folder)
    (folder / "pyproject.toml").write_text(PYPROJECT)
    (folder / "wheel_backend.py").write_text(BACKEND)
    return folder
