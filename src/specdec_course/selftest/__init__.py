"""The kit proving itself: the catalogue of known bugs and correct variants, the selftest that grades them with the
real pipeline, and the solution run as a student would."""
