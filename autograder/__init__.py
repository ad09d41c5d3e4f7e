"""Hidden checks and grading configuration: instructors only, never installed or published.

`specdec-course autograde` puts the folder above this one on the kernel's import path, so the hidden
parts of the test cells can `from autograder import hidden`.
"""
