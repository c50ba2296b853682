"""Formatting a report's blocks as GitHub-flavoured markdown and as self-contained HTML.

A report is a list of blocks:

- ``("h1", text)``, ``("h2", text)``, ``("h3", text)``, ``("p", text)``
- ``("toc", [heading text, ...])``: links to those ``h2`` sections
- ``("table", header, rows)``: cells are strings
- ``("figure", name, caption, relative path)``
- ``("details", summary, open)`` ... ``("end_details",)``: a collapsed part (``<details>``,
  which GitHub renders in markdown too)

Anchors follow GitHub's rule for headings (lower case, punctuation dropped, spaces to
hyphens), so the table of contents works in ``report.md`` on GitHub and in ``report.html``.
"""

from __future__ import annotations

import base64
import html
import re
from typing import Sequence

import pandas as pd

__all__ = ["DECIMALS", "anchor"]

DECIMALS = 4


# A run's label is its checkpoint's file name: figure files use its stem (``scatter_digits-laya.png``).
_CHECKPOINT_SUFFIX = re.compile(r"\.(pt|pth|ckpt|bin|safetensors)(?=$|[\s\[#])")


def _slug(text: str) -> str:
    """A run label as part of a file name: the checkpoint's extension dropped, other characters made safe."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", _CHECKPOINT_SUFFIX.sub("", text)).strip("-.") or "run"


def anchor(heading: str) -> str:
    """GitHub's anchor of a markdown heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _num(value) -> str:
    """A number of a table; an undefined value (NaN, missing) reads "undefined"."""
    try:
        return "undefined" if pd.isna(value) else f"{float(value):.{DECIMALS}f}"
    except (TypeError, ValueError):
        return "undefined"


def _ci(low, high, note=None) -> str:
    """``[low, high]``, or ``n/a (reason)`` where no interval exists (:mod:`laya_eval.stats.intervals`)."""
    if pd.isna(low) or pd.isna(high):
        return f"n/a ({note if isinstance(note, str) and note else 'no interval recorded'})"
    return f"[{_num(low)}, {_num(high)}]"


_NUMERIC = re.compile(
    r"^(n/a( \(.*\))?|—|undefined|[-+]?\d+(\.\d+)?(e[-+]?\d+)?|\[[-+]?\d+\.\d+, [-+]?\d+\.\d+\]"
    r"|[-+]?\d+\.\d+( ± \d+\.\d+)? (\[[-+]?\d+\.\d+, [-+]?\d+\.\d+\]|n/a \(.*\)))$"
)


def _numeric(rows: Sequence[Sequence[str]], column: int) -> bool:
    return bool(rows) and all(_NUMERIC.match(str(row[column])) for row in rows)


def _md_text(text: str) -> str:
    """Text for markdown that reads as it does in report.html: HTML (``&``, ``<``, ``>``) as entities, every
    character that would start emphasis, code, a link, an image, strike-through or a table cell
    backslash-escaped, one line. Strings from files and options (labels, titles, names) pass through here."""
    text = html.escape(str(text), quote=False)
    return re.sub(r"([\\`*_\[\]~|!#])", r"\\\1", text).replace("\r", " ").replace("\n", " ")


def _md_cell(text: str) -> str:
    # Numbers and intervals are written by the report itself: left as they are, so they stay aligned.
    text = str(text)
    return text if _NUMERIC.match(text) else _md_text(text)


def _markdown(blocks: Sequence[tuple]) -> str:
    lines: list[str] = []
    for block in blocks:
        kind = block[0]
        if kind in ("h1", "h2", "h3"):
            lines += ["#" * int(kind[1]) + " " + _md_text(block[1]), ""]
        elif kind == "p":
            lines += [_md_text(block[1]), ""]
        elif kind == "toc":
            lines += ["**Contents**", "", *[f"- [{_md_text(h)}](#{anchor(h)})" for h in block[1]], ""]
        elif kind == "table":
            header, rows = block[1], block[2]
            lines.append("| " + " | ".join(map(_md_cell, header)) + " |")
            lines.append("|" + "|".join("---:" if _numeric(rows, k) else "---" for k in range(len(header))) + "|")
            lines += ["| " + " | ".join(map(_md_cell, row)) + " |" for row in rows]
            lines.append("")
        elif kind == "figure":
            lines += [f"![{_md_text(block[2])}]({block[3]})", "", f"*{_md_text(block[2])}*", ""]
        elif kind == "details":
            # A blank line after <summary> lets GitHub render the markdown inside.
            lines += [f"<details{' open' if block[2] else ''}><summary>{html.escape(block[1])}</summary>", ""]
        elif kind == "end_details":
            lines += ["</details>", ""]
    return "\n".join(lines)


_STYLE = (
    "body{font-family:system-ui,sans-serif;max-width:1150px;margin:2em auto;padding:0 1em;color:#222;"
    "line-height:1.45}table{border-collapse:collapse;margin:.5em 0 1.2em;font-size:.86em}"
    "th,td{border:1px solid #ccc;padding:3px 8px;text-align:left}th{background:#f2f2f2}"
    ".num{text-align:right;font-variant-numeric:tabular-nums}img{max-width:100%}figure{margin:1em 0 1.6em}"
    "figcaption{font-size:.85em;color:#555;max-width:60em}nav{background:#f7f7f7;padding:.4em 1.2em;"
    "border:1px solid #ddd;display:inline-block}nav ul{margin:.3em 0;padding-left:1.2em}"
    "details{margin:.4em 0 .8em;border-left:3px solid #ddd;padding-left:.8em}"
    "summary{cursor:pointer;font-weight:600;margin:.3em 0}h2{margin-top:1.6em;border-bottom:1px solid #eee}"
    # A narrow window (a phone) scrolls a wide table inside its own box instead of widening the page.
    ".wide{overflow-x:auto;max-width:100%}p,li,figcaption{overflow-wrap:anywhere}"
)


def _html_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    esc = lambda text: html.escape(str(text), quote=True)  # noqa: E731
    cls = ["" if not _numeric(rows, k) else ' class="num"' for k in range(len(header))]
    head = "".join(f"<th{c}>{esc(h)}</th>" for c, h in zip(cls, header))
    body = "".join("<tr>" + "".join(f"<td{c}>{esc(v)}</td>" for c, v in zip(cls, row)) + "</tr>" for row in rows)
    return f'<div class="wide"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'


def _html(blocks: Sequence[tuple], embeds: dict[str, tuple[str, bytes]]) -> str:
    esc = lambda text: html.escape(str(text), quote=True)  # noqa: E731
    title = next((b[1] for b in blocks if b[0] == "h1"), "report")
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{esc(title)}</title>",
        f"<style>{_STYLE}</style></head><body>",
    ]
    for block in blocks:
        kind = block[0]
        if kind == "h2":
            parts.append(f'<h2 id="{esc(anchor(block[1]))}">{esc(block[1])}</h2>')
        elif kind in ("h1", "h3", "p"):
            parts.append(f"<{kind}>{esc(block[1])}</{kind}>")
        elif kind == "toc":
            items = "".join(f'<li><a href="#{esc(anchor(h))}">{esc(h)}</a></li>' for h in block[1])
            parts.append(f"<nav><strong>Contents</strong><ul>{items}</ul></nav>")
        elif kind == "table":
            parts.append(_html_table(block[1], block[2]))
        elif kind == "figure" and block[1] in embeds:
            mime, data = embeds[block[1]]
            uri = f"data:{'image/png' if mime == 'png' else 'image/svg+xml'};base64,{base64.b64encode(data).decode()}"
            parts.append(
                f'<figure><img alt="{esc(block[2])}" src="{uri}"><figcaption>{esc(block[2])}</figcaption></figure>'
            )
        elif kind == "details":
            parts.append(f"<details{' open' if block[2] else ''}><summary>{esc(block[1])}</summary>")
        elif kind == "end_details":
            parts.append("</details>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
