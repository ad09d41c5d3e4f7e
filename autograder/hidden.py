"""The hidden halves of the assignment's test cells: the public checks on other cases.

Other prompts, other starting tokens, other k and a second zoo pair (`tiny-b`) than the visible cells
use, so that code fitted to the visible cases does not pass.
"""

from pathlib import Path

from specdec_kit import checks, zoo

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the instructor extra installs tomli
    import tomli as tomllib

CONFIG = tomllib.loads((Path(__file__).with_name("config.toml")).read_text())
SPEEDUP_MIN_RATIO = float(CONFIG["speedup"]["min_ratio"])

PROMPTS = ("Customer: Do you have this jacket in a larger size?\nClerk:",
           "one, two, three, four, five, six, seven, eight,",
           "Summarize in one sentence: a draft model proposes and a target model checks.")


def _starts(first: int, count: int) -> tuple[int, ...]:
    cycle = zoo.scripted_script().cycle
    return tuple(cycle[first:first + count])


def check_loading(decoder_class):
    checks.check_loading(decoder_class, pair="tiny-b")


def check_draft_tokens(decoder_class):
    checks.check_draft_tokens(decoder_class, starts=_starts(40, 6), k_values=(3, 5, 9))


def check_verify_alignment(decoder_class):
    checks.check_verify_alignment(decoder_class, starts=_starts(50, 8), k_values=(1, 3, 5, 8))


def check_correction_and_bonus(decoder_class):
    checks.check_correction_and_bonus(decoder_class, rejected=3, accepted_from=1)


def check_eos_and_budget(decoder_class):
    checks.check_eos_and_budget(decoder_class, checks.eos_and_budget_cases(chain_start=1, cycle_start=80))


def check_exact(decoder_class):
    checks.check_exact(decoder_class, pair="tiny-b", prompts=PROMPTS, k_values=(3, 5, 6), max_tokens=36)


def check_counts(decoder_class):
    checks.check_counts(decoder_class, starts=_starts(60, 5), k=3)


def check_cache_use(decoder_class):
    checks.check_cache_use(decoder_class, starts=_starts(70, 4), k=3)
