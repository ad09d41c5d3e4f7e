"""The instructors' commands, one module each: `register(commands)` adds its parser (shared options from
`options.py`), `run(args)` does it. `specdec_course.cli` lists them in the course's order."""
