"""Every round of one decode, as the kit saw it: recorded off a decode's forwards, drawn alone or over correct
decoding's rounds.

    from specdec_kit.rounds import record_rounds
"""

from .record import record_rounds
from .view import Round, Rounds, compare, compare_text

__all__ = ["Round", "Rounds", "compare", "compare_text", "record_rounds"]
