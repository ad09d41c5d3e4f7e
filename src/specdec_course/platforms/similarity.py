"""Pairs of submissions whose solution code is near-identical once names and layout are set aside, for a
person to look at (never a verdict).

The code of a notebook's solution cells is tokenised; comments, strings and layout go, and every name the
student binds becomes `_` (attribute names after a dot and builtins stay: they are the APIs the code
calls, not the student's choice). What remains is cut into overlapping runs of SHINGLE tokens; runs that
the release itself holds (signatures, docstrings' code, the kit's calls) are dropped, and two submissions
are compared by the Jaccard index of their remaining runs.
"""

from __future__ import annotations

import builtins
import io
import keyword
import tokenize
from dataclasses import dataclass
from itertools import combinations

import nbformat

SHINGLE = 8  # tokens per run: long enough that two independent solutions rarely share many
THRESHOLD = 0.6  # Jaccard index from which a pair is shown
_SKIPPED = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING,
            tokenize.ENDMARKER}
_KEPT_NAMES = set(dir(builtins)) | {"self", "torch"}


@dataclass
class Pair:
    first: str
    second: str
    similarity: float  # Jaccard index of their solution code's runs, release runs removed
    shared: int  # runs they have in common


def solution_code(notebook: nbformat.NotebookNode) -> str:
    """The code of the notebook's solution cells (all its code cells if none is marked)."""
    code = [c for c in notebook.cells if c.cell_type == "code"]
    marked = [c for c in code if c.metadata.get("nbgrader", {}).get("solution")]
    return "\n".join(c.source for c in marked or code)


def normalised_tokens(code: str) -> list[str]:
    """`code`'s tokens with the student's names, strings and layout made uniform; [] if it does not tokenise."""
    out, after_dot = [], False
    try:
        for token in tokenize.generate_tokens(io.StringIO(code).readline):
            if token.type in _SKIPPED:
                continue
            if token.type == tokenize.NAME and not keyword.iskeyword(token.string):
                out.append(token.string if after_dot or token.string in _KEPT_NAMES else "_")
            elif token.type == tokenize.STRING or tokenize.tok_name[token.type].startswith("FSTRING"):
                out.append("S")  # Python 3.12 splits f-strings into parts
            else:
                out.append(token.string)
            after_dot = token.string == "."
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return []
    return out


def shingles(code: str) -> set[int]:
    tokens = normalised_tokens(code)
    return {hash(tuple(tokens[i:i + SHINGLE])) for i in range(len(tokens) - SHINGLE + 1)}


def similar_pairs(notebooks: dict[str, nbformat.NotebookNode], release: nbformat.NotebookNode,
                  threshold: float = THRESHOLD) -> list[Pair]:
    """Pairs of `notebooks` (by student) at or above `threshold`, most similar first."""
    template = shingles(solution_code(release))
    prints = {student: shingles(solution_code(nb)) - template for student, nb in notebooks.items()}
    pairs = []
    for (a, runs_a), (b, runs_b) in combinations(sorted(prints.items()), 2):
        union = runs_a | runs_b
        if not union:
            continue
        shared = len(runs_a & runs_b)
        if shared / len(union) >= threshold:
            pairs.append(Pair(a, b, shared / len(union), shared))
    return sorted(pairs, key=lambda p: -p.similarity)
