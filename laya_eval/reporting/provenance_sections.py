"""Which code made each folder of a report: laya-eval's version, the sha256 of its code and its git commit.

Read from each folder's ``manifest.json`` (``versions.laya_eval`` and ``code``:
:func:`laya_eval.output.origin.provenance`), shown by ``laya-eval report`` and in the report's "Provenance"
section. A folder whose manifest predates these entries reads "not recorded"; ``n/a`` for the commit means the
code did not run from a git checkout (or git could not tell).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import pandas as pd

__all__ = ["PROVENANCE_COLUMNS", "PROVENANCE_TITLE", "SHORT", "code_cells", "provenance_blocks", "provenance_table"]

PROVENANCE_TITLE = "Provenance"
PROVENANCE_COLUMNS = ["run", "kind", "laya_eval", "code", "commit"]
#: Hex digits shown of the code's sha256 and of the commit (the manifest holds them whole).
SHORT = 12
_NOT_RECORDED = "not recorded"


def _hex(value: Any) -> str | None:
    """``value`` when it is a hexadecimal string (a digest or a commit as a manifest records it), else None."""
    if isinstance(value, str) and value and all(c in "0123456789abcdef" for c in value.lower()):
        return value.lower()
    return None


def code_cells(manifest: Mapping[str, Any] | None) -> tuple[str, str, str]:
    """(version, code, commit) as a report shows them for one folder's manifest.

    ``code`` and ``commit`` are the first :data:`SHORT` hex digits, the commit followed by ``(modified)`` when a
    ``.py`` file of the package differed from it; ``not recorded`` where the manifest has no such entry, and
    ``n/a`` for the commit of code that did not run from a git checkout.
    """
    manifest = manifest if isinstance(manifest, Mapping) else {}
    versions = manifest.get("versions") if isinstance(manifest.get("versions"), Mapping) else {}
    version = versions.get("laya_eval")
    version = version if isinstance(version, str) and version else _NOT_RECORDED
    code = manifest.get("code")
    if not isinstance(code, Mapping):
        return version, _NOT_RECORDED, _NOT_RECORDED
    digest = _hex(code.get("sha256"))
    commit = _hex(code.get("commit"))
    commit_cell = "n/a" if commit is None else commit[:SHORT] + (" (modified)" if code.get("dirty") is True else "")
    return version, _NOT_RECORDED if digest is None else digest[:SHORT], commit_cell


def provenance_table(runs: Sequence[Any] = (), sanity: Sequence[Any] = (), mixers: Sequence[Any] = ()) -> pd.DataFrame:
    """One row per folder read (faithfulness runs, then sanity and mixers folders): its label, kind and
    :func:`code_cells`. Columns :data:`PROVENANCE_COLUMNS`."""
    rows = [
        [r.label, kind, *code_cells(r.manifest)]
        for kind, group in (("faithfulness", runs), ("sanity", sanity), ("mixers", mixers))
        for r in group
    ]
    return pd.DataFrame(rows, columns=PROVENANCE_COLUMNS)


def provenance_blocks(table: pd.DataFrame) -> list[tuple]:
    """The "Provenance" section: one row per folder (empty for a table without rows)."""
    if table.empty:
        return []
    return [
        ("h2", PROVENANCE_TITLE),
        (
            "p",
            f"The code that wrote each folder, from its manifest: laya-eval's version, the sha256 of its "
            f"code (the first {SHORT} hex digits) and the git commit it ran from ('modified': a .py file "
            "differed from that commit; n/a: not run from a git checkout).",
        ),
        (
            "table",
            ["run", "kind", "laya-eval", "code sha256", "commit"],
            [[str(v) for v in row] for row in table.itertuples(index=False)],
        ),
    ]
