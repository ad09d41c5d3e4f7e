"""Grading a class: collecting its submissions, the course directory, each notebook's own run (nbgrader) and the kit's
verdict, the row, the gradebook, the feedback pages, the batch and its results on disk; and what makes the files
staff open safe (sanitised HTML, CSV cells that start no formula)."""
