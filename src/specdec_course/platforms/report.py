"""A class's report: one self-contained HTML page (plots inline, no external link) for the course staff.

    specdec-course report graded            # writes graded/report.html

It shows the score distribution, each test's pass rate, the most common failure messages (which bugs the
class made), the speed test's measured ratios against HF assisted generation, the submissions the static
scan flagged, and pairs of submissions whose solution code is near-identical (`similarity.py`), for a
person to look at. Students' ids and messages are escaped where they are written, and the page as a whole goes
through safe_html.clean_page: no script runs in it and it fetches nothing.
"""

from __future__ import annotations

import base64
import html
import io
import json
import re
from collections import Counter
from pathlib import Path

import nbformat

from ..core.nbgrader_course import ASSIGNMENT, NOTEBOOK
from ..grading import safe_html
from ..grading.course import course_extra_credit, course_points, hand_graded_cells
from ..grading.results import read_rows
from ..grading.row import is_grader_failure
from .similarity import THRESHOLD, similar_pairs

NOT_GRADED = ("missing", "invalid")
TOP_FAILURES = 12


def _figure_png(fig) -> str:
    """A matplotlib figure as an inline <img>, closed after."""
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    data = base64.b64encode(buffer.getvalue()).decode()
    return f'<img alt="" src="data:image/png;base64,{data}">'


def _plots(scores: list[float], max_score: float, pass_rates: dict[str, float], ratios: list[float],
           min_ratio: float | None) -> dict[str, str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plots = {}
    fig, ax = plt.subplots(figsize=(6, 3))
    ax.hist(scores, bins=min(20, max(5, len(scores))), range=(0, max_score), color="#4c72b0", edgecolor="white")
    ax.set(xlabel="auto-graded points", ylabel="students", title="Score distribution")
    plots["scores"] = _figure_png(fig)
    fig, ax = plt.subplots(figsize=(6, 0.35 * len(pass_rates) + 1))
    tests = list(pass_rates)[::-1]
    ax.barh(tests, [100 * pass_rates[t] for t in tests], color="#55a868")
    ax.set(xlim=(0, 100), xlabel="% of graded submissions passing", title="Pass rate per test")
    plots["tests"] = _figure_png(fig)
    if ratios:
        fig, ax = plt.subplots(figsize=(6, 2.5))
        ax.hist(ratios, bins=min(20, max(5, len(ratios))), color="#8172b2", edgecolor="white")
        if min_ratio is not None:
            ax.axvline(min_ratio, color="#c44e52", linestyle="--", label=f"bar {min_ratio:g}x")
            ax.legend(loc="upper left", fontsize=8)
        ax.set(xlabel="tokens/s over HF assisted generation, same k", ylabel="students",
               title="Speed test: measured ratio")
        plots["speed"] = _figure_png(fig)
    return plots


def common_failures(failures: dict[str, dict[str, str]]) -> list[tuple[str, str, int, list[str]]]:
    """(test, message, how many students, who), most common first; numbers in messages are set aside so
    that one mistake made with different values counts once."""
    groups: dict[tuple[str, str], list[str]] = {}
    for student, failed in failures.items():
        for test, message in failed.items():
            key = (test, re.sub(r"\d+(\.\d+)?", "#", message)[:240])
            groups.setdefault(key, []).append(student)
    ranked = sorted(groups.items(), key=lambda item: (-len(item[1]), item[0]))
    return [(test, message, len(students), sorted(students)) for (test, message), students in ranked]


def build_report(graded: Path, min_ratio: float | None = None) -> str:
    """The report's HTML for autograde's --out folder `graded`."""
    course = graded / "course"
    rows = read_rows(graded / "grades.csv")
    if not rows:
        raise ValueError(f"{graded} holds no grades.csv: run specdec-course autograde --out {graded} first")
    points = {**course_points(course), **course_extra_credit(course)}  # a bonus test passes with its extra credit
    auto_tests = [t for t in points if t not in hand_graded_cells(course)]
    handed_in = {s: r for s, r in rows.items() if r["status"] not in NOT_GRADED}
    scores = [float(r["score"] or 0) for r in handed_in.values()]
    max_score = max((float(r["max_score"] or 0) for r in rows.values()), default=0.0) or 1.0
    pass_rates = {t: sum(float(r.get(t) or 0) >= points[t] for r in handed_in.values()) / max(1, len(handed_in))
                  for t in auto_tests}
    ratios = {s: float(r["vs_hf_assisted"]) for s, r in handed_in.items() if r.get("vs_hf_assisted")}
    failures = {s: _failures(graded / "done" / f"{s}.json") for s in handed_in}
    flagged = {s: r["flags"] for s, r in rows.items() if r.get("flags")}
    notebooks = {s: nb for s in handed_in if (nb := _submitted(course, s)) is not None}
    release = nbformat.read(course / "source" / ASSIGNMENT / NOTEBOOK, as_version=4)
    pairs = similar_pairs(notebooks, release)
    plots = _plots(scores, max_score, pass_rates, list(ratios.values()), min_ratio)
    statuses = Counter(r["status"] for r in rows.values())
    regrade = sorted(s for s, r in rows.items() if is_grader_failure(r["status"], r["message"]))
    return _page(graded, rows, statuses, scores, max_score, plots, pass_rates, common_failures(failures), ratios,
                 min_ratio, flagged, pairs, len(notebooks), regrade)


def _failures(path: Path) -> dict[str, str]:
    if not path.is_file():
        return {}
    return json.loads(path.read_text())["grade"].get("failures", {})


def _submitted(course: Path, student: str) -> nbformat.NotebookNode | None:
    path = course / "submitted" / student / ASSIGNMENT / NOTEBOOK
    try:
        return nbformat.read(path, as_version=4)
    except (OSError, ValueError):
        return None


def _table(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _page(graded, rows, statuses, scores, max_score, plots, pass_rates, failures, ratios, min_ratio, flagged,
          pairs, compared, regrade) -> str:
    e = html.escape
    median = sorted(scores)[len(scores) // 2] if scores else 0.0
    parts = [f"<h1>Class report: {e(str(graded))}</h1>",
             f"<p>{len(rows)} students: " + ", ".join(f"{n} {e(s)}" for s, n in statuses.most_common())
             + f". Median auto-graded score {median:g} / {max_score:g} among {len(scores)} graded. Graded under: "
             + (", ".join(f"{n} {e(s)}" for s, n in Counter(r.get("isolation") or "nothing run" for r in rows.values())
                          .most_common()))
             + (" (<strong>no sandbox</strong>: the students' code ran as the grader's user)"
                if any(r.get("isolation") == "none" for r in rows.values()) else "") + ".</p>",
             (f"<p><strong>The grader failed on {len(regrade)}</strong> (its own failure, not the students': no score "
              f"given): {e(', '.join(regrade))}. Grade them again with <code>specdec-course autograde ... --student "
              f"{e(' '.join(regrade))}</code>.</p>" if regrade else ""),
             "<h2>Scores</h2>", plots["scores"],
             "<h2>Tests</h2>", plots["tests"],
             _table(["test", "passing"], [[e(t), f"{100 * r:.0f}%"] for t, r in pass_rates.items()]),
             "<h2>Most common failures</h2>",
             "<p>Messages with their numbers set aside; each names the bug the checks saw.</p>",
             _table(["test", "message", "students", "who"],
                    [[e(t), e(m), str(n), e(", ".join(who))] for t, m, n, who in failures[:TOP_FAILURES]])
             if failures else "<p>No test failed.</p>",
             "<h2>Speed test</h2>"]
    if ratios:
        below = sorted(s for s, r in ratios.items() if min_ratio is not None and r < min_ratio)
        middle = sorted(ratios.values())[len(ratios) // 2]
        parts += [plots["speed"], f"<p>{len(ratios)} timed; median ratio {middle:.2f}x"
                  + (f"; below the bar of {min_ratio:g}x: {e(', '.join(below)) or 'none'}" if min_ratio else "")
                  + ".</p>"]
    else:
        parts.append("<p>No submission reached the speed test's timing.</p>")
    parts += ["<h2>Flagged by the static scan</h2>",
              _table(["student", "findings"], [[e(s), e(f)] for s, f in sorted(flagged.items())])
              if flagged else "<p>None.</p>",
              "<h2>Near-identical solution code</h2>",
              f"<p>{compared} submissions compared after setting aside names, comments, strings and layout, and "
              f"the release's own code; pairs at a Jaccard index of {THRESHOLD:g} or more, for a person to look "
              "at (not a verdict).</p>",
              _table(["first", "second", "similarity", "shared runs"],
                     [[e(p.first), e(p.second), f"{p.similarity:.2f}", str(p.shared)] for p in pairs])
              if pairs else "<p>No pair.</p>"]
    style = ("body{font-family:sans-serif;max-width:60em;margin:2em auto;color:#222}"
             "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:.3em .6em;"
             "text-align:left;vertical-align:top}img{max-width:100%}")
    return safe_html.clean_page("<!DOCTYPE html><html><head><meta charset='utf-8'><title>Class report</title>"
                                f"<style>{style}</style></head><body>{''.join(parts)}</body></html>\n")
