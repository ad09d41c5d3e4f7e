"""The grading protocol students install: the seam that opens a notebook, the probes that run its classes and report
plain data, the models a grading child holds, and the replay of a submission's definitions."""
