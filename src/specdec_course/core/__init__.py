"""What every other part of the instructor package reads: the course's settings (`config.toml`), its pinned versions,
the assignment as nbgrader holds it, the grading plan, the oracle of correct decoding, and files read following no
link."""
