"""Screenshots of what a student sees, for docs/students.md: each decoder's round view (`specdec-kit rounds`) and the
feedback page of two catalogue bugs where a visible check draws their rounds over correct decoding's.

    python tests/views.py docs/figures/views      # `make views`: about 3 minutes on 2 cores, headless Chromium

The round pages decode one prompt on the offline CPU pair; the feedback pages come from `specdec-course selftest`
grading the bugs for real, each cropped to the test cell whose failing visible case is drawn, without the cell's score
and the kit's verdict under it: they show its points, which the screenshots leave out so that they never go stale when
points change.
"""

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from PIL import Image

from conftest import CHROMIUM, chromium, probe

BIN = Path(sys.executable).parent
DECODERS = ("greedy", "cached", "sampling", "lookup", "adaptive")
PROMPT = "The future of Artificial Intelligence is"
DRAWN = {"off_by_one_early": "test_eos_and_budget", "no_bonus_token": "test_counts"}  # bug -> a cell that draws it
WIDTH = 1200


def round_views(out: Path, work: Path) -> None:
    for decoder in DECODERS:
        page = work / f"rounds-{decoder}.html"
        subprocess.run([BIN / "specdec-kit", "rounds", "--pair", "synthetic-small", "--decoder", decoder, "--k", "4",
                        "--max-new-tokens", "48", "--prompt", PROMPT, "--seed", "1", "--out", page], check=True)
        chromium("--hide-scrollbars", f"--screenshot={out / f'rounds-{decoder}.png'}", f"--window-size={WIDTH},560",
                 page.as_uri())


def cell_box(page: Path, grade_id: str) -> tuple[int, int]:
    """(top, height) in pixels of the page's cell `grade_id`, as Chromium lays it out."""
    script = (f"var r = document.getElementById('cell-id={grade_id}').getBoundingClientRect();"
              "document.title = 'BOX ' + Math.round(r.top + scrollY) + ' ' + Math.round(r.height);")
    dom = probe(page, script, "--hide-scrollbars", f"--window-size={WIDTH},12000")  # laid out as screenshotted
    top, height = re.search(r"BOX (\d+) (\d+)", dom).groups()
    return int(top), int(height)


def without_points(page: Path, grade_id: str, out: Path) -> Path:
    """A copy of the feedback page whose cell `grade_id` shows neither its score nor the kit's verdict under it (its
    last output), which give its points."""
    cell = f'[id="cell-id={grade_id}"]'
    style = f"<style>{cell} .panel-heading .pull-right, {cell} .output_area:last-child {{display: none}}</style>"
    out.write_text(page.read_text().replace("</head>", style + "</head>", 1))
    return out


def feedback_views(out: Path, work: Path) -> None:
    subprocess.run([BIN / "specdec-course", "selftest", "--jobs", "2", "--only", *DRAWN, "--workdir", work / "graded"],
                   check=True)
    for bug, test in DRAWN.items():
        page = without_points(work / "graded" / "feedback" / f"{bug}.html", test, work / f"{bug}.html")
        top, height = cell_box(page, test)
        whole = work / f"{bug}.png"
        chromium("--hide-scrollbars", f"--screenshot={whole}", f"--window-size={WIDTH},{top + height + 200}",
                 page.as_uri())
        Image.open(whole).crop((0, max(top - 10, 0), WIDTH, top + height + 10)).save(out / f"feedback-{bug}.png")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    out = parser.parse_args().out
    if CHROMIUM is None:
        sys.exit("needs headless Chromium (Debian's chromium package)")
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as work:
        round_views(out, Path(work))
        feedback_views(out, Path(work))
    print(f"wrote {', '.join(sorted(p.name for p in out.glob('*.png')))} in {out}")


if __name__ == "__main__":
    main()
