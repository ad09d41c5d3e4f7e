"""The round view (`specdec_kit.rounds`): built from a decode's result and forwards, for every decoder of the
assignment, one line per round whose counts are the DecodeResult's.

Example run: python -m pytest tests/kit/rounds/test_rounds.py -q
"""

import html
import re

import pytest
import torch

from specdec_kit import zoo
from specdec_kit.core.timing import ForwardCosts
from specdec_kit.protocol.adapters import load_decoder_classes
from specdec_kit.rounds.record import record_rounds
from specdec_kit.rounds.view import FOLD, LEGEND, STYLE, compare, compare_text

from conftest import SOLUTION, needs_chromium, screenshot

PROMPT = "a b c"
COSTS = ForwardCosts(draft=0.05, verify=(1.0,) * 18)  # given, so that adaptive k measures nothing
DECODERS = {  # name: (class, pair, constructor's keywords, sampling settings)
    "greedy": ("SpeculativeDecoder", "scripted", {}, {}),
    "cached": ("CachedSpeculativeDecoder", "scripted", {}, {}),
    "sampling": ("SpeculativeSampler", "sampling", {}, {"temperature": 1.0,
                                                         "generator": torch.Generator().manual_seed(3)}),
    "lookup": ("PromptLookupDecoder", "scripted", {}, {}),
    "adaptive": ("AdaptiveSpeculativeDecoder", "scripted", {"forward_costs": COSTS}, {}),
}


@pytest.fixture(scope="module")
def classes():
    return load_decoder_classes(SOLUTION, tuple(name for name, *_ in DECODERS.values()))


@pytest.fixture(scope="module", params=list(DECODERS))
def recorded(request, classes):
    name, pair, init, sampling = DECODERS[request.param]
    decoder = classes[name](*(str(p) for p in zoo.materialize(pair)), device="cpu", **init)
    prompt = PROMPT if pair == "scripted" else "The future of"
    return request.param, record_rounds(decoder, prompt, max_tokens=30, num_speculative_tokens=3, **sampling)


def test_each_round_is_the_decode_results(recorded):
    """Counts from the DecodeResult; the drafts read off the target's forwards; the kept drafts and the target's
    tokens, round after round, are the output."""
    name, rounds = recorded
    result = rounds.result
    assert [r.proposed for r in rounds.rounds] == result.proposed and \
           [r.accepted for r in rounds.rounds] == result.accepted, f"{name}: counts differ from the DecodeResult"
    assert all(r.drafts is not None and len(r.drafts) == r.proposed for r in rounds.rounds), \
        f"{name}: one target forward a round shows every round's drafts: {rounds.note}"
    emitted = [t for r in rounds.rounds
               for t in [*r.drafts[:r.accepted], *([r.target_token] if r.target_token is not None else [])]]
    assert emitted == result.token_ids, f"{name}: the rounds' kept drafts and target tokens are the output"
    assert rounds.ended in ("EOS", "budget"), f"{name}: a decode of 30 tokens ends at EOS or its budget"


def test_caches_after_each_rollback_hold_the_text_but_its_last_token(recorded):
    """The cached decoders' next forward runs on a cache of the text so far less the target's last token."""
    name, rounds = recorded
    if name == "greedy":
        assert all(r.cache_after == {"target": None, "draft": None} for r in rounds.rounds) \
            and "caches" not in rounds._repr_html_(), "a decoder that keeps no cache is drawn without caches"
        return
    length = len(rounds.prompt_ids)
    for r in rounds.rounds[:-1]:
        length += r.accepted + 1
        assert r.cache_after["target"] == length - 1, f"{name}: target cache after the rollback, round {r}"


def test_html_has_a_line_per_round_a_legend_and_nothing_fetched(recorded):
    name, rounds = recorded
    page = rounds._repr_html_()
    assert page.count("<tr class='round'>") == len(rounds.rounds), f"{name}: one line per round"
    assert all(html.escape(words) in page for _, words in LEGEND), f"{name}: the legend names each colour"
    assert "<script" not in page and not re.search(r"(src|href)=|https?:", page), f"{name}: nothing is fetched"
    assert ("<details>" in page) == (len(rounds.rounds) > FOLD), f"{name}: rounds after {FOLD} fold away"
    ids = re.findall(r"title='id (\d+)'", page)
    assert len(ids) >= len(rounds.result.token_ids), f"{name}: each token shows its id on hover"


def test_saved_page_is_a_whole_document(recorded, tmp_path):
    name, rounds = recorded
    page = rounds.save(tmp_path / f"{name}.html").read_text()
    assert page.startswith("<!doctype html>") and page.count("<tr class='round'>") == len(rounds.rounds)


def shows_colour(pixels, css_class: str, least: int = 20) -> bool:
    """Whether at least `least` pixels of a screenshot have the background colour of `css_class` in the view's style."""
    css = re.search(rf"\.{css_class}(?: td)?{{background:#(\w{{6}})", STYLE).group(1)
    rgb = torch.tensor([int(css[i:i + 2], 16) / 255 for i in (0, 2, 4)])
    shot = torch.as_tensor(pixels[..., :3].copy())
    return int(((shot - rgb).abs().max(dim=-1).values < 0.02).sum()) >= least


@pytest.mark.slow
@pytest.mark.release
@needs_chromium
def test_the_page_renders_in_headless_chromium_with_its_colours(recorded, tmp_path):
    """Drawn by a browser, the saved page is not blank and shows an accepted draft's colour and the target's
    token's (a correction's or a bonus token's)."""
    name, rounds = recorded
    pixels = screenshot(rounds.save(tmp_path / f"{name}.html"), width=1000, height=900)
    assert pixels.std() > 0.05, f"{name}: the screenshot is not blank (spread {pixels.std():.3f})"
    assert shows_colour(pixels, "sd-accepted"), f"{name}: accepted drafts are drawn in their colour"
    assert shows_colour(pixels, "sd-correction") or shows_colour(pixels, "sd-bonus"), f"{name}: the target's token"


@pytest.fixture(scope="module")
def bug_drawn(classes, tmp_path_factory):
    """(the solution's rounds drawn over the expected ones, no_bonus_token's, the expected rounds) on the scripted
    pair, the expected rounds from the pair's script alone."""
    from specdec_course.selftest.catalogue import load_catalogue, make_submission
    from specdec_kit.models.baseline import prompt_for_token
    from specdec_kit.rounds.expected import scripted_rounds

    from conftest import REPO

    dirs = [str(p) for p in zoo.materialize("scripted")]
    prompt = prompt_for_token(zoo.scripted_script().cycle[10])
    solution = record_rounds(classes["CachedSpeculativeDecoder"](*dirs, device="cpu"), prompt, 24, 4)
    expected = scripted_rounds(solution.prompt_ids, solution.result, 24, solution.decode)
    [entry] = [e for e in load_catalogue(REPO / "autograder") if e.name == "no_bonus_token"]
    path = tmp_path_factory.mktemp("bug") / "bug.ipynb"
    import nbformat

    nbformat.write(make_submission(SOLUTION, entry), path)
    bug = load_decoder_classes(path, ("CachedSpeculativeDecoder",))["CachedSpeculativeDecoder"](*dirs, device="cpu")
    return compare(solution, expected), record_rounds(bug, prompt, 24, 4), expected


def test_scripted_rounds_predict_the_solutions_and_a_bug_is_drawn_against_them(bug_drawn):
    """On the scripted pair the expected rounds equal the solution's; a decoder that drops the bonus token is drawn
    over them with its first differing round named, as HTML and as text."""
    same, bug_rounds, expected = bug_drawn
    assert "the rounds are the same" in same and "yours sd-first" not in same, "the script predicts the rounds"
    drawn = compare(bug_rounds, expected)
    first = next(i for i, r in enumerate(expected.rounds) if r.bonus)
    assert f"first difference: round {first}:" in drawn and "a bonus token" in drawn, drawn[-600:]
    assert drawn.count("<tr class='round yours sd-first'>") == 1, "one round is marked first"
    text = compare_text(bug_rounds, expected).splitlines()
    assert text[0].startswith(f"first difference: round {first}:") and text[-2].startswith(f"> round {first} yours") \
        and text[-1].startswith(f"> round {first} expected") and "(bonus)" in text[-1], "\n".join(text)


@pytest.mark.parametrize("name, cached", [("SpeculativeDecoder", False), ("CachedSpeculativeDecoder", True)])
def test_expected_rounds_keep_caches_as_the_decoder_they_stand_for(classes, name, cached):
    """Correct decoding's rounds hold what the solution's decoder of that part held after each rollback: the cached
    one's caches, none for the uncached one, whose comparison then draws no caches at all."""
    from specdec_kit.models.baseline import prompt_for_token
    from specdec_kit.rounds.expected import scripted_rounds

    decoder = classes[name](*(str(p) for p in zoo.materialize("scripted")), device="cpu")
    script = zoo.scripted_script()
    for start, max_tokens, k in ((script.cycle[10], 24, 4), (script.eos_chain[0], 30, 6), (script.cycle[3], 6, 4)):
        solution = record_rounds(decoder, prompt_for_token(start), max_tokens, k)
        expected = scripted_rounds(solution.prompt_ids, solution.result, max_tokens, solution.decode, cached=cached)
        assert [r.cache_after for r in expected.rounds] == [r.cache_after for r in solution.rounds], (name, start)
        assert cached or "caches" not in compare(solution, expected), f"{name}: no caches drawn where none is kept"


def test_an_uncropped_cache_is_outlined_at_the_first_round_whose_caches_differ(classes, tmp_path):
    """A cached decoder that never crops its caches emits the right tokens for a while: the first difference the view
    outlines is the first round whose caches differ, named as such, not a later one whose tokens differ."""
    import nbformat

    from specdec_course.selftest.catalogue import load_catalogue, make_submission
    from specdec_kit.models.baseline import prompt_for_token
    from specdec_kit.rounds.expected import scripted_rounds
    from specdec_kit.rounds.view import first_difference

    from conftest import REPO

    [entry] = [e for e in load_catalogue(REPO / "autograder") if e.name == "cache_not_cropped"]
    nbformat.write(make_submission(SOLUTION, entry), tmp_path / "bug.ipynb")
    bug = load_decoder_classes(tmp_path / "bug.ipynb", ("CachedSpeculativeDecoder",))["CachedSpeculativeDecoder"]
    decoder = bug(*(str(p) for p in zoo.materialize("scripted")), device="cpu")
    drawn = record_rounds(decoder, prompt_for_token(zoo.scripted_script().cycle[20]), 30, 4)
    expected = scripted_rounds(drawn.prompt_ids, drawn.result, 30, drawn.decode)
    first = first_difference(drawn, expected)
    caches = [r.cache_after for r in drawn.rounds] != [r.cache_after for r in expected.rounds]
    assert caches and first == next(i for i, (a, b) in enumerate(zip(drawn.rounds, expected.rounds))
                                    if a.cache_after != b.cache_after), f"outlined round {first}"
    text = compare_text(drawn, expected)
    assert f"first difference: round {first}: keeps" in text and "positions in the target's cache" in text, text
    assert compare(drawn, expected).count("<tr class='round yours sd-first'>") == 1


@pytest.mark.slow
@pytest.mark.release
@needs_chromium
def test_the_comparison_renders_in_headless_chromium_with_the_first_difference_marked(bug_drawn, tmp_path):
    _, bug_rounds, expected = bug_drawn
    page = tmp_path / "compare.html"
    page.write_text(f"<!doctype html><meta charset='utf-8'><body>{compare(bug_rounds, expected)}</body>\n")
    pixels = screenshot(page, width=1000, height=900)
    assert pixels.std() > 0.05, f"the screenshot is not blank (spread {pixels.std():.3f})"
    assert shows_colour(pixels, "sd-rounds tr.sd-first"), "the first differing round is marked"


def test_the_rounds_command_writes_a_page(tmp_path, capsys):
    from specdec_kit import cli

    out = tmp_path / "rounds.html"
    assert cli.main(["rounds", "--pair", "scripted", "--decoder", "lookup", "--k", "3", "--prompt", PROMPT,
                     "--max-new-tokens", "12", "--out", str(out)]) == 0
    page, printed = out.read_text(), capsys.readouterr().out
    rounds = int(printed.split(" rounds,")[0].rsplit(" ", 1)[1])
    assert page.count("<tr class='round'>") == rounds and f"wrote {out}" in printed, printed


def stuck_in(*records: dict):
    """The rounds of a decode that never returned, from its verifier's records (`VerifyCall.record`)."""
    from specdec_kit.rounds.expected import verified_rounds

    return verified_rounds([1, 2], list(records), lambda ids: "".join(f"<{i}>" for i in ids))


def test_a_stuck_round_is_marked_with_the_cause_its_rounds_show():
    """The round a decode got stuck in: its verifier's token dropped by the loop (the next round ran on the same
    text), a verifier whose earlier rounds fit a slice one position late, or rounds that fit either."""
    from specdec_kit.core.no_progress import DROPPED, EITHER, LATE
    from specdec_kit.rounds.view import NO_TOKEN, compare_text

    dropped = stuck_in({"text": 2, "drafts": [7], "accepted": 1, "next": [8], "slice": "L-1"},
                       {"text": 4, "drafts": [], "accepted": 0, "next": [9], "slice": "L-1"},
                       {"text": 4, "drafts": [], "accepted": 0, "next": [9], "slice": "L-1"})
    late = stuck_in({"text": 2, "drafts": [7, 8], "accepted": 0, "next": [4], "slice": "L"},
                    {"text": 3, "drafts": [], "accepted": 0, "next": [], "slice": "both"})
    either = stuck_in({"text": 2, "drafts": [], "accepted": 0, "next": [], "slice": "both"})
    for rounds, cause in ((dropped, DROPPED), (late, LATE), (either, EITHER)):
        last = rounds.rounds[-1]
        assert last.cause == cause and last.target_token is None, f"the stuck round is marked {cause}: {last}"
        assert all(not r.cause for r in rounds.rounds[:-1]), "only the round it was stuck in is marked"
        page, text = rounds._repr_html_(), compare_text(rounds, rounds)
        assert html.escape(NO_TOKEN[cause]) in page and NO_TOKEN[cause] in text, f"the view names {NO_TOKEN[cause]!r}"
    assert dropped.result.token_ids == [7, 8], "the token the loop dropped is not drawn as added"


def test_a_stuck_rounds_cause_is_read_from_known_words_only():
    """A record's slice is the kit's word, one of a few; any other value tells nothing and is never drawn."""
    from specdec_kit.core.no_progress import EITHER

    rounds = stuck_in({"text": 2, "drafts": [7], "accepted": 1, "next": [8], "slice": "<b>L</b>"},
                      {"text": 4, "drafts": [], "accepted": 0, "next": [], "slice": None})
    assert rounds.rounds[-1].cause == EITHER and "<b>L</b>" not in rounds._repr_html_(), rounds.rounds
