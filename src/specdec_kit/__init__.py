"""specdec-kit: the student package of the speculative decoding assignment.

Everything here is public, and students read all of it: model loading, the offline model zoo, prompts, the
result type, cache helpers, the forward counters, the visible checks (their expected answers as data), the
benchmark and its plots, and the notebook seam. It implements nothing students write; the solution, the
hidden checks and the grader are the instructor package's (`specdec_course`), which students never receive.
"""

from . import moved
from .core.cache import cache_kwargs, cache_of, common_prefix_length, crop_to
from .core.result import DecodeResult

moved.install()  # notebooks released before the kit had rooms import its modules by their old names

__all__ = ["DecodeResult", "cache_kwargs", "cache_of", "common_prefix_length", "crop_to"]
__version__ = "0.1.0"
