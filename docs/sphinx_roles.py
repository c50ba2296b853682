"""A griffe extension for the docs site: Sphinx cross-reference roles in docstrings read as code.

laya-eval's docstrings are NumPy style and name other objects with Sphinx roles (``:func:`evaluate```), which
``help()`` and Sphinx read well but mkdocstrings would print literally. This extension rewrites each role to a
Markdown code span of its target (``~pkg.mod.name`` to ``name``, as Sphinx shows it) and each reST double-backquote
literal to a single-backquote span, before mkdocstrings renders the docstring. Loaded by ``mkdocs.yml``
(``extensions: [docs/sphinx_roles.py]``); nothing in the package imports it.
"""

from __future__ import annotations

import re

import griffe

# :func:`target`, :py:meth:`~a.b.c`, :class:`text <target>`.
_ROLE = re.compile(r":(?:py:)?(?:func|meth|class|mod|attr|data|exc|obj|const|term|ref|doc):`([^`]+)`")
_LITERAL = re.compile(r"``([^`]+)``")


def _role_text(match: re.Match) -> str:
    target = match.group(1).strip()
    shown = re.match(r"^(.*?)\s*<([^>]+)>$", target)  # "text <target>": Sphinx shows the text
    if shown:
        return f"`{shown.group(1)}`"
    if target.startswith("~"):
        target = target[1:].rsplit(".", 1)[-1]
    return f"`{target}`"


def markdown_docstring(text: str) -> str:
    """``text`` with every Sphinx role and reST literal written as a Markdown code span."""
    return _LITERAL.sub(r"`\1`", _ROLE.sub(_role_text, text))


class SphinxRoles(griffe.Extension):
    """Rewrite each object's docstring with :func:`markdown_docstring` once the tree is loaded."""

    def on_object(self, *, obj: griffe.Object, **kwargs) -> None:  # noqa: D102 - griffe's hook
        if obj.docstring is not None:
            obj.docstring.value = markdown_docstring(obj.docstring.value)
