"""specdec-kit: the support package of the speculative decoding assignment.

Everything here is public: model loading, the offline model zoo, prompts, the result type, cache
helpers and the notebook seam. The reference solution and the hidden checks are not in this package.
"""

from .cache import common_prefix_length, crop_to
from .result import DecodeResult

__all__ = ["DecodeResult", "common_prefix_length", "crop_to"]
__version__ = "0.1.0"
