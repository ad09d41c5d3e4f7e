"""A class's report: one self-contained HTML page (plots inline, no external link) for the course staff.

    specdec-course report graded            # writes graded/report.html

It shows the score distribution, each required test's pass rate, what the class got wrong, the speed test's
measured ratios against HF assisted generation, the submissions the static scan flagged, and pairs of submissions
whose solution code is near-identical (`similarity.py`), for a person to look at. Students' ids and messages are
escaped where they are written, and the page as a whole goes through safe_html.clean_page: no script runs in it and
it fetches nothing.

What the class got wrong comes from the verdicts kept in done/<student>.json (each failed test's first message
line) and the points in grades.csv. A failure whose message says a method still raises the release's
NotImplementedError (feedback.not_written) is a part not attempted, not a bug: the required tests' bugs are ranked by
the points they cost, each distinct message once; a required method left unwritten is listed apart, and each bonus
part is counted as attempted / passed, its failures among those who attempted it.
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
import pandas as pd

from ..core.nbgrader_course import ASSIGNMENT, NOTEBOOK
from ..grading import safe_html
from ..grading.course import course_extra_credit, course_points, hand_graded_cells
from ..grading.feedback import not_written
from ..grading.results import read_rows
from ..grading.row import is_grader_failure
from .similarity import THRESHOLD, similar_pairs

NOT_GRADED = ("missing", "invalid")


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


def _pattern(message: str) -> str:
    """A message with its numbers set aside, so that one mistake made with different values counts once."""
    return re.sub(r"\d+(\.\d+)?", "#", message)[:240]


def failure_records(rows: dict[str, dict[str, str]], failures: dict[str, dict[str, str]],
                    worth: dict[str, float]) -> pd.DataFrame:
    """One record per test a graded student failed: student, test, message (numbers set aside), lost (the points,
    or a bonus test's extra credit, it did not earn) and written (False: a method still raised NotImplementedError).

    A test failed when its row in grades.csv earned less than it is `worth`; its message comes from the student's
    done record ("failed" without one).
    """
    records = [(student, test, failures.get(student, {}).get(test) or "failed", full - float(row.get(test) or 0))
               for student, row in rows.items() for test, full in worth.items() if float(row.get(test) or 0) < full]
    frame = pd.DataFrame(records, columns=["student", "test", "message", "lost"])
    frame["written"] = ~frame["message"].map(not_written).astype(bool)
    frame["message"] = frame["message"].map(_pattern)
    return frame


def distinct_failures(records: pd.DataFrame, order: list[str]) -> pd.DataFrame:
    """Each distinct message once: the tests it failed (in notebook `order`), how many students, the points it cost
    and who; the costliest first."""
    if records.empty:
        return pd.DataFrame(columns=["message", "tests", "students", "lost", "who"])
    grouped = records.groupby("message").agg(
        tests=("test", lambda tests: ", ".join(sorted(set(tests), key=order.index))),
        students=("student", "nunique"), lost=("lost", "sum"), who=("student", lambda who: ", ".join(sorted(set(who)))))
    return grouped.reset_index().sort_values(["lost", "students", "message"], ascending=[False, False, True])


def not_written_by_student(records: pd.DataFrame) -> pd.Series:
    """Points each student lost to required methods left unwritten, the most first."""
    lost = records[~records["written"]].groupby("student")["lost"].sum()
    return lost.sort_index().sort_values(ascending=False, kind="stable")


def bonus_counts(records: pd.DataFrame, graded: int, extra_credit: dict[str, float]) -> pd.DataFrame:
    """Per bonus test: its extra credit, how many of the `graded` students attempted it (their verdict did not stop
    at a method still raising the release's NotImplementedError) and how many of those passed."""
    left = records[~records["written"]].groupby("test")["student"].nunique()
    failed = records[records["written"]].groupby("test")["student"].nunique()
    counts = pd.DataFrame({"credit": pd.Series(extra_credit, dtype=float)})
    counts["attempted"] = graded - left.reindex(counts.index, fill_value=0).astype(int)
    counts["passed"] = counts["attempted"] - failed.reindex(counts.index, fill_value=0).astype(int)
    return counts


def build_report(graded: Path, min_ratio: float | None = None) -> str:
    """The report's HTML for autograde's --out folder `graded`."""
    course = graded / "course"
    rows = read_rows(graded / "grades.csv")
    if not rows:
        raise ValueError(f"{graded} holds no grades.csv: run specdec-course autograde --out {graded} first")
    points, extra_credit = course_points(course), course_extra_credit(course)  # graded cells in notebook order
    required = {t: p for t, p in points.items() if t not in {*hand_graded_cells(course), *extra_credit}}
    handed_in = {s: r for s, r in rows.items() if r["status"] not in NOT_GRADED}
    scores = [float(r["score"] or 0) for r in handed_in.values()]
    max_score = max((float(r["max_score"] or 0) for r in rows.values()), default=0.0) or 1.0
    pass_rates = {t: sum(float(r.get(t) or 0) >= required[t] for r in handed_in.values()) / max(1, len(handed_in))
                  for t in required}
    ratios = {s: float(r["vs_hf_assisted"]) for s, r in handed_in.items() if r.get("vs_hf_assisted")}
    regrade = sorted(s for s, r in rows.items() if is_grader_failure(r["status"], r["message"]))
    judged = {s: r for s, r in handed_in.items() if s not in regrade}  # a grader's failure says nothing of the code
    failures = {s: _failures(graded / "done" / f"{s}.json") for s in judged}
    records = failure_records(judged, failures, {**required, **extra_credit})
    wrong = _what_went_wrong(records, list(points), set(required), extra_credit, len(judged))
    flagged = {s: r["flags"] for s, r in rows.items() if r.get("flags")}
    notebooks = {s: nb for s in handed_in if (nb := _submitted(course, s)) is not None}
    release = nbformat.read(course / "source" / ASSIGNMENT / NOTEBOOK, as_version=4)
    pairs = similar_pairs(notebooks, release)
    plots = _plots(scores, max_score, pass_rates, list(ratios.values()), min_ratio)
    statuses = Counter(r["status"] for r in rows.values())
    return _page(graded, rows, statuses, scores, max_score, plots, pass_rates, wrong, ratios, min_ratio, flagged,
                 pairs, len(notebooks), regrade)


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


def _what_went_wrong(records: pd.DataFrame, order: list[str], required: set[str], extra_credit: dict[str, float],
                     graded: int) -> str:
    """The report's section on what the class got wrong, as HTML (every student's text escaped)."""
    e = html.escape
    ours, bonus = records[records["test"].isin(required)], records[records["test"].isin(extra_credit)]
    bugs = distinct_failures(ours[ours["written"]], order)
    unwritten = not_written_by_student(ours)
    counts = bonus_counts(bonus, graded, extra_credit)
    bonus_bugs = distinct_failures(bonus[bonus["written"]], order)
    return "".join([
        "<h2>What the class got wrong</h2>",
        "<h3>Parts 1 and 2: the required tests</h3>",
        "<p>Each distinct message once (its numbers set aside), with the tests it failed and the points it cost the "
        "class, the costliest first; each names the bug the checks saw.</p>",
        _table(["message", "tests", "students", "points lost", "who"],
               [[e(r.message), e(r.tests), str(r.students), f"{r.lost:g}", e(r.who)] for r in bugs.itertuples()])
        if len(bugs) else "<p>No required test failed on code that was written.</p>",
        ("<p>Not written (a required method still raises the release's NotImplementedError), points lost: "
         + e(", ".join(f"{student} ({lost:g})" for student, lost in unwritten.items())) + ".</p>")
        if len(unwritten) else "",
        "<h3>Bonus parts (extra credit)</h3>",
        f"<p>Of {graded} graded; attempted: the verdict did not stop at a method still raising the release's "
        "NotImplementedError. Failures below are those of students who attempted the part.</p>",
        _table(["test", "extra credit", "attempted / passed"],
               [[e(r.Index), f"{r.credit:g}", f"{r.attempted} / {r.passed}"] for r in counts.itertuples()]),
        _table(["message", "tests", "students", "extra credit missed", "who"],
               [[e(r.message), e(r.tests), str(r.students), f"{r.lost:g}", e(r.who)] for r in bonus_bugs.itertuples()])
        if len(bonus_bugs) else ""])


def _table(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _page(graded, rows, statuses, scores, max_score, plots, pass_rates, wrong, ratios, min_ratio, flagged,
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
             wrong,
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
