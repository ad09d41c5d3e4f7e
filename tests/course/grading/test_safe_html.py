"""Nothing a student wrote runs where the kit's pages are opened, and the plots and the round view still show.

Hostile HTML comes from Hypothesis (random nestings of script, event handlers, javascript:, vbscript: and data:
URLs, entity-encoded ones, svg, iframe, meta refresh, base, link, style with url(), ...) and by hand (tests/corpora.py:
the cells the corpus grades). Pages are checked by a second parser (`safe_html.unsafe`) and opened in headless
Chromium: a page built by the course's nbconvert (SafePageExporter, as nbgrader's feedback uses it) and formgrader's
own view of a submission, as its server renders it.

Example run: python -m pytest tests/course/grading/test_safe_html.py -q
"""

import re
from pathlib import Path

import nbformat
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nbconvert.exporters import HTMLExporter
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output
from traitlets.config import Config

from specdec_course.core.nbgrader_course import ASSIGNMENT, NOTEBOOK, write_course_config
from specdec_course.grading import feedback, safe_nbconvert
from specdec_course.grading.safe_html import CSP_META, ROUNDS_STYLE, clean_fragment, clean_page, unsafe

from conftest import image_widths, needs_chromium, pixels_of_colour, screenshot, title_after_scripts
from corpora import HOSTILE_MARKDOWN, PLOT_PNG, PLOT_WIDTH, READER_MARKER, hostile_outputs

TITLE = "Feedback on the report"
REPORT = {"grade": True, "solution": True, "locked": False, "grade_id": "report", "points": 10, "schema_version": 3}
ACCEPTED = "#c8f0c8"  # .sd-accepted's background in the round view's stylesheet

TAGS = ["script", "img", "svg", "iframe", "a", "style", "meta", "base", "link", "object", "embed", "form", "input",
        "math", "details", "body", "div", "span", "table", "td", "textarea", "noscript", "template", "title", "video",
        "source", "frame", "xmp", "button", "p", "image", "use", "animate", "set", "marquee"]
ATTRIBUTES = ["onload", "onerror", "onclick", "ontoggle", "onmouseover", "href", "src", "srcdoc", "style", "action",
              "formaction", "data", "xlink:href", "http-equiv", "content", "srcset", "background", "poster", "class",
              "id", "title", "width", "name", "open", "attributename", "to", "values"]
VALUES = ["javascript:alert(1)", "JaVaScRiPt:alert(1)", " javascript:x", "java&#x73;cript:x", "&#106;avascript:x",
          "java\tscript:x", "vbscript:msgbox(1)", "data:text/html,<script>alert(1)</script>",
          "data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==", "data:image/svg+xml,<svg onload=alert(1)>",
          f"data:image/png;base64,{PLOT_PNG[:40]}", "http://example.invalid/x.png", "//example.invalid/x",
          "url(http://example.invalid/x)", "color: red; background: url(http://example.invalid/x)",
          "expression(alert(1))", "0;url=javascript:alert(1)", "refresh", "#top", "x\" onerror=\"alert(1)", "1"]
TEXTS = ["<", ">", "&", "\"", "'", "-->", "<!--", "]]>", "</script>", "</style>", "&lt;script&gt;", "text",
         ROUNDS_STYLE, "<![CDATA[", "<?xml?>"]


def attribute() -> st.SearchStrategy[str]:
    quote = st.sampled_from(['"', "'", ""])
    return st.tuples(st.sampled_from(ATTRIBUTES), quote, st.sampled_from(VALUES)).map(
        lambda a: f' {a[0]}={a[1]}{a[2]}{a[1]}')


def element(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.tuples(st.sampled_from(TAGS), st.lists(attribute(), max_size=3), st.lists(children, max_size=3),
                     st.booleans()).map(lambda e: f"<{e[0]}{''.join(e[1])}>{''.join(e[2])}" + (f"</{e[0]}>" * e[3]))


fragments = st.recursive(st.sampled_from(TEXTS), element, max_leaves=12).map(str)


def page_of(body: str) -> str:
    return f"<!DOCTYPE html><html><head><title>{TITLE}</title><style>p{{margin:0}}</style></head><body>{body}</body>" \
           "</html>"


@settings(max_examples=300, deadline=None)
@given(st.lists(fragments, min_size=1, max_size=4).map("".join))
def test_no_hostile_mixture_survives_the_sanitiser(body):
    """Whatever mixture of hostile pieces a page's body holds, the cleaned page holds only the allow-list's tags,
    attributes and URLs (read again by html.parser), and its Content-Security-Policy."""
    assert unsafe(clean_page(page_of(body))) == []


@pytest.mark.parametrize("piece, gone", [
    ("<script>alert(1)</script>", "alert(1)"),
    ('<img src="x" onerror="alert(1)">', "onerror"),
    ('<a href="javascript:alert(1)">x</a>', "javascript:"),
    ('<a href="java&#x73;cript:alert(1)">x</a>', "cript:"),
    ('<a href="data:text/html,x">x</a>', "data:text"),
    ('<img src="data:text/html;base64,PHNjcmlwdD4=">', "data:text"),
    ('<svg onload="alert(1)"><circle r="5"/></svg>', "onload"),
    ('<iframe srcdoc="&lt;script&gt;alert(1)&lt;/script&gt;"></iframe>', "iframe"),
    ('<meta http-equiv="refresh" content="0;url=javascript:alert(1)">', "refresh"),
    ('<base href="http://example.invalid/">', "example.invalid"),
    ('<link rel="stylesheet" href="http://example.invalid/x.css">', "example.invalid"),
    ("<style>body{background:url(http://example.invalid/x)}</style>", "example.invalid"),
    ('<p style="background:url(http://example.invalid/x)">x</p>', "example.invalid"),
    ('<img src="http://example.invalid/seen.png">', "example.invalid"),
    ('<form action="http://example.invalid/"><input name="x"></form>', "example.invalid"),
])
def test_each_hand_made_piece_is_removed(piece, gone):
    cleaned = clean_page(page_of(f"<p>kept</p>{piece}"))
    body = cleaned[cleaned.index("<body>"):]
    assert gone not in body and "kept" in body and unsafe(cleaned) == [], body


def test_what_a_page_needs_is_kept():
    """A plot (a data: PNG), an SVG drawn as an image, anchors, nbconvert's classes, an ANSI colour, the round view's
    stylesheet, and the head's own title and stylesheet; the CSP comes first."""
    plot = f'<img alt="" src="data:image/png;base64,{PLOT_PNG}">'
    svg = '<img src="data:image/svg+xml;base64,PHN2Zy8+">'
    kept = {plot: plot, svg: svg, '<a href="#top">top</a>': 'href="#top"', '<a name="top"></a>': 'name="top"',
            '<span class="ansi-red-fg">err</span>': '<span class="ansi-red-fg">err</span>', ROUNDS_STYLE: ROUNDS_STYLE,
            '<span style="color: rgb(1,2,3)">c</span>': 'style="color:rgb(1, 2, 3)"'}
    cleaned = clean_page(page_of("".join(kept)))
    assert cleaned.index(CSP_META) < cleaned.index("<title>"), "the policy comes before anything it governs"
    for piece, shown in kept.items():
        assert shown in cleaned, f"{piece[:60]} is kept"
    assert f"<title>{TITLE}</title>" in cleaned and "<style>p{margin:0}</style>" in cleaned, cleaned[:400]


def test_the_round_views_stylesheet_is_safe_wherever_it_lands():
    """clean_fragment puts it back where it was, even inside an attribute's value: it has no quote to end one."""
    assert '"' not in ROUNDS_STYLE and "&" not in ROUNDS_STYLE, "the stylesheet cannot close an attribute"
    cleaned = clean_fragment(f'<span title="{ROUNDS_STYLE}">x</span>{ROUNDS_STYLE}')
    assert cleaned.count(ROUNDS_STYLE) == 2 and unsafe(page_of(cleaned).replace("<head>", f"<head>{CSP_META}")) == [], \
        cleaned


def test_outputs_keep_what_a_page_shows_and_lose_the_rest():
    """SafeOutputs: no JavaScript output, no image but base64, no metadata but a numeric width and height."""
    cell = new_code_cell("x", outputs=hostile_outputs())
    cell.outputs[-1].metadata = {"image/png": {"width": 40, "height": "30 onerror=x"}}
    cleaned, _ = safe_nbconvert.SafeOutputs().preprocess_cell(cell, {}, 0)
    mimes = [sorted(o.data) for o in cleaned.outputs]
    assert ["application/javascript"] not in mimes and all("application/javascript" not in m for m in mimes), mimes
    assert [o.metadata for o in cleaned.outputs if "image/png" in o.data] == [{}, {"image/png": {"width": 40}}], \
        "the image whose data would close its attribute is gone; a string width goes, a numeric one stays"
    assert all(o.metadata == {} for o in cleaned.outputs if "text/html" in o.data), "no isolated iframe"


def test_clean_feedback_refuses_an_exporter_that_does_not_sanitise():
    """A course whose config lacks SafePageExporter gets no page at all rather than a page that runs scripts."""
    with pytest.raises(feedback.FeedbackError, match="exporter_class is not SafePageExporter"):
        feedback.CleanFeedback(parent=HTMLExporter()).preprocess(new_notebook(), {})


# ---------------------------------------------------------------------------------------------
# Pages in headless Chromium


def course_config(lines: list[str]) -> Config:
    config = Config()
    exec("\n".join(lines), {"c": config})  # the lines as nbgrader_config.py runs them
    return config


def hostile_notebook() -> nbformat.NotebookNode:
    from course.grading.test_feedback import rounds_picture

    return new_notebook(cells=[
        new_markdown_cell(HOSTILE_MARKDOWN, metadata={"nbgrader": REPORT}),  # the hand-graded report, as the issue's
        new_code_cell("show()", execution_count=1, outputs=[*hostile_outputs(), rounds_picture()]),
        new_code_cell("print('<script>')", execution_count=2,
                      outputs=[new_output("stream", name="stdout", text="<script>document.title='x'</script>\n")]),
    ], metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})


@pytest.mark.slow
@needs_chromium
def test_a_page_of_a_hostile_notebook_runs_nothing_and_shows_its_plot_and_rounds(tmp_path):
    """Rendered as the course renders feedback (its config, SafePageExporter), with the Content-Security-Policy and
    without it (the sanitiser alone): no script ran, the plot decodes, the round view has its colours."""
    config = course_config(safe_nbconvert.reader_config())
    exporter = safe_nbconvert.SafePageExporter(config=config, template_name="classic")
    page = tmp_path / "page.html"
    page.write_text(exporter.from_notebook_node(hostile_notebook(), {"metadata": {"name": TITLE}})[0])
    assert unsafe(page.read_text()) == [], "the page holds nothing outside the allow-list"
    bare = tmp_path / "bare.html"
    bare.write_text(page.read_text().replace(CSP_META, ""))
    for opened in (page, bare):
        assert title_after_scripts(opened) == TITLE, f"{opened.name}: a student's script changed the title"
    assert PLOT_WIDTH in image_widths(page), f"the plot decodes under the policy: widths {image_widths(page)}"
    assert pixels_of_colour(screenshot(page, height=2400), ACCEPTED) >= 20, "the round view keeps its colours"


def formgrader_view(course: Path) -> str:
    """The HTML formgrader's server sends for alice's submission: its own exporter, set up as its extension does."""
    from nbgrader.server_extensions.formgrader.formgrader import FormgradeExtension

    extension = FormgradeExtension()
    extension.root_dir = str(course)
    extension.initialize([], root=str(course))

    class WebApp:
        settings = {}

    extension.init_tornado_settings(WebApp)
    resources = {"assignment_id": ASSIGNMENT, "notebook_id": Path(NOTEBOOK).stem, "submission_id": "1", "index": 0,
                 "total": 1, "base_url": "", "student": "alice", "last_name": None, "first_name": None,
                 "notebook_path": "x"}
    path = course / "autograded" / "alice" / ASSIGNMENT / NOTEBOOK
    return WebApp.settings["nbgrader_exporter"].from_filename(str(path), resources=resources)[0]


@pytest.fixture()
def submitted_course(tmp_path) -> Path:
    course = tmp_path / "course"
    path = course / "autograded" / "alice" / ASSIGNMENT / NOTEBOOK
    path.parent.mkdir(parents=True)
    nbformat.write(hostile_notebook(), path)
    return course


@needs_chromium
@pytest.mark.parametrize("lines, runs", [
    (feedback.feedback_config(Path("/srv/ag"), Path("/srv/course")), False),
    (["c.HTMLExporter.sanitize_html = True"], True),
], ids=["the kit's course", "nbgrader's own switch alone"])
def test_formgraders_view_of_a_hostile_submission(submitted_course, tmp_path, lines, runs, monkeypatch):
    """formgrader renders the autograded notebook in the Jupyter server's origin with its own scripts. Under the
    kit's config no student's script is in it and the plot shows; under nbgrader's `sanitize_html` alone, a
    markdown cell's script still runs (its templates render markdown cells without nbconvert's clean_html)."""
    monkeypatch.chdir(submitted_course)  # formgrader runs in the course folder
    write_course_config(submitted_course, *lines)
    page = tmp_path / "formgrade.html"
    page.write_text(formgrader_view(submitted_course))
    title = title_after_scripts(page)
    assert (READER_MARKER in title) == runs, f"title after load: {title!r}"
    if runs:
        text = page.read_text()
        assert re.search(rf"<script>[^<]*{READER_MARKER} markdown script", text), \
            "the switch alone leaves a markdown cell's script in the page"
        assert re.search(rf"<img [^>]*onerror=\"document.title='{READER_MARKER}-width'\"", text), \
            "the switch alone leaves the handler an image's width carried"
    else:
        scripts = re.findall(r"<script[^>]*>(.*?)</script>", page.read_text(), re.S)
        assert not [s for s in scripts if READER_MARKER in s], "no script element carries the student's code"
        handlers = re.findall(r"\son\w+\s*=\s*(\"[^\"]*\"|'[^']*'|[^\s>]*)", page.read_text())
        assert not [h for h in handlers if "document.title" in h], f"event handlers but formgrader's: {handlers}"
        assert PLOT_WIDTH in image_widths(page), "the plot shows"
