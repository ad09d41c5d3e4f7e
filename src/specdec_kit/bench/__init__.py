"""The benchmark: a notebook's decoders timed against target greedy and HF assisted generation, their readiness, the
notebook's sweeps, plots and measured figures, and the demo.

    from specdec_kit.bench import benchmark_decoder
"""

from .benchmark import benchmark_decoder, compare

__all__ = ["benchmark_decoder", "compare"]
