"""specdec-course: the instructor package of the speculative decoding assignment.

Release and publish, the oracle and the visible checks' recorded answers, grading and its isolation, the verdict,
feedback, the class report, exports, Gradescope, the selftest and the catalogue's machinery; the `specdec-course`
command. It imports the student package (`specdec_kit`), never the other way round, and is never shipped to
students. docs/architecture.md draws both.
"""
