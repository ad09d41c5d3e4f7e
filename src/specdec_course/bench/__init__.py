"""The benchmarks only instructors run: HF's own methods with their rounds, and adaptive k judged across pairs."""
