"""Where grades go: Gradescope's autograder, the LMS's imports, the class report and its similarity pairs."""
