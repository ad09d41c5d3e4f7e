"""Writing what students receive: the solution notebook built from its jupytext source, the student release
(nbgrader), the published tree, and the visible checks' recorded answers."""
