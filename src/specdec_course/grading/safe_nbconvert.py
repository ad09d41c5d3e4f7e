"""The course's nbconvert and nbgrader render notebooks through safe_html: feedback pages and formgrader's view.

nbgrader renders a course notebook to HTML in two places: the feedback pages (GenerateFeedback, whether the kit,
`nbgrader generate_feedback` or formgrader's button runs it) and formgrader's view of a submission, which the
Jupyter server serves from its own origin. Both use nbconvert's HTMLExporter with nbgrader's templates, which pass
a markdown cell's raw HTML and an output's HTML through, and write an image output's width unquoted (a width of
`1 onerror=...` runs). The lines of `reader_config`, in the course's nbgrader_config.py, make both safe:

- `SafeOutputs` (a preprocessor of every HTMLExporter): outputs keep the types a page shows as text or image,
  images valid base64, their metadata a numeric width and height only;
- nbconvert's own `sanitize_html` switch: outputs' HTML and markdown go through its `clean_html` filter, which
  here is `safe_html.clean_fragment`, and no JavaScript or widget output is written;
- nbgrader's templates pass each rendered markdown cell through `strip_files_prefix`: here that filter also
  cleans, the only hook their markdown cells give;
- `SafePageExporter` writes the feedback pages: the whole page through `safe_html.clean_page` (its CSP, no script).

`feedback.feedback_config` adds these lines to the course the kit sets up.
"""

from __future__ import annotations

import re

import nbformat
from nbconvert.exporters import HTMLExporter
from nbconvert.filters import strip_files_prefix
from nbconvert.preprocessors import Preprocessor

from ..core.nbgrader_course import import_name
from . import safe_html

SHOWN = {"text/plain", "text/html", "text/markdown", "text/latex", "image/png", "image/jpeg", "image/svg+xml"}
IMAGES = {"image/png", "image/jpeg"}  # written by the template into an <img src="data:..."> as they are
SCRIPTED = {"application/javascript", "application/vnd.jupyter.widget-view+json"}  # shown only by running a script
_BASE64 = re.compile(r"[A-Za-z0-9+/=\s]*")


def _size(value) -> int | None:
    """A width or height as a number of pixels, else None (the template writes it into the tag unquoted)."""
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else None


class SafeOutputs(Preprocessor):
    """Each output as a page may show it: the types in SHOWN, images that are base64, no metadata but an image's
    numeric width and height (no `filenames`, no `isolated` iframe). An output that a script would draw (a widget,
    a tqdm bar) goes whole, as does one left with nothing to show: a static page never showed them."""

    def preprocess_cell(self, cell: nbformat.NotebookNode, resources: dict, index: int):
        if "outputs" in cell:
            cell.outputs = [output for output in map(_shown, cell.outputs) if output is not None]
        return cell, resources


def _shown(output: nbformat.NotebookNode) -> nbformat.NotebookNode | None:
    if "data" not in output:  # a stream or an error: text, which the templates escape
        return output
    if SCRIPTED & set(output.data):
        return None
    metadata = output.get("metadata", {})
    output.data = {mime: value for mime, value in output.data.items() if mime in SHOWN
                   and (mime not in IMAGES or (isinstance(value, str) and _BASE64.fullmatch(value)))}
    given = {mime: spec for mime in IMAGES & set(output.data) if isinstance(spec := metadata.get(mime), dict)}
    sizes = {mime: {key: size for key in ("width", "height") if (size := _size(spec.get(key)))}
             for mime, spec in given.items()}
    output.metadata = {mime: size for mime, size in sizes.items() if size}
    return output if output.data else None


def markdown_html(text: str) -> str:
    """nbconvert's `strip_files_prefix`, then safe_html.clean_fragment: what nbgrader's templates write for a
    rendered markdown cell (and a grader's comment)."""
    return safe_html.clean_fragment(strip_files_prefix(text))


class SafePageExporter(HTMLExporter):
    """HTMLExporter whose pages go through safe_html.clean_page: nbgrader's GenerateFeedback writes these."""

    def from_notebook_node(self, nb: nbformat.NotebookNode, resources: dict | None = None, **kw):
        page, resources = super().from_notebook_node(nb, resources, **kw)
        return safe_html.clean_page(page), resources


def reader_config() -> list[str]:
    """Lines of nbgrader_config.py that install all of the above."""
    filters = {"clean_html": import_name(safe_html.clean_fragment), "strip_files_prefix": import_name(markdown_html)}
    return ["c.HTMLExporter.sanitize_html = True",
            f"c.HTMLExporter.filters = {filters!r}",
            f"c.HTMLExporter.preprocessors = [{import_name(SafeOutputs)!r}]",
            f"c.GenerateFeedback.exporter_class = {import_name(SafePageExporter)!r}"]
