"""The zoo builds offline, once, atomically and safely from parallel processes: its pairs' tables (zoo/tables.py)
and the models built from them (zoo/models.py), through `specdec_kit.zoo`."""

import json
import multiprocessing
import re

import pytest
from transformers import AutoModelForCausalLM

from specdec_kit import zoo


def _materialize_in(cache: str, queue) -> None:
    import os

    os.environ["SPECDEC_KIT_CACHE"] = cache
    queue.put(tuple(str(p) for p in zoo.materialize("scripted")))


@pytest.mark.slow  # two processes build a pair each
@pytest.mark.release
def test_parallel_materialize_builds_once(tmp_path):
    """Two graders asking at once get the same complete directories; no temporary directory is left."""
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    workers = [context.Process(target=_materialize_in, args=(str(tmp_path), queue)) for _ in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=300)
        assert worker.exitcode == 0, f"each materializing process should exit with status 0, got {worker.exitcode}"
    first, second = queue.get(), queue.get()
    assert first == second, f"both processes should get the same model directories, got {first} and {second}"
    root = tmp_path / "zoo"
    built = [p.name for p in next(root.iterdir()).iterdir() if p.is_dir()]
    assert built == [f"scripted-v{zoo.ZOO_VERSION}"], f"expected one finished pair and no leftovers, found {built}"
    for path in first:
        AutoModelForCausalLM.from_pretrained(path)


def test_build_record_and_known_pairs(tiny_dirs):
    record = json.loads((zoo.materialize("tiny")[0].parent / "zoo.json").read_text())
    assert record["pair"] == "tiny" and record["min_margin"] >= zoo.MIN_MARGIN, (
        f"tiny's zoo.json should name the pair 'tiny' with a logit margin of at least {zoo.MIN_MARGIN}, got {record}"
    )
    assert 0.5 <= record["agreement"] <= 0.9, (
        f"tiny's draft should agree with its target on 50-90% of tokens, got {record['agreement']:.0%}"
    )
    assert set(zoo.pair_names()) == {"scripted", "sampling", "tiny", "tiny-b", "synthetic-small", "synthetic-pythia"}, (
        f"the zoo's pairs should be scripted, sampling, tiny, tiny-b, synthetic-small and synthetic-pythia, "
        f"got {sorted(zoo.pair_names())}"
    )


def test_scripted_model_follows_its_script(scripted_dirs):
    import torch

    script = zoo.scripted_script()
    target = AutoModelForCausalLM.from_pretrained(scripted_dirs[0])
    draft = AutoModelForCausalLM.from_pretrained(scripted_dirs[1])
    ids = torch.tensor([list(script.cycle[:40])])
    with torch.inference_mode():
        assert target(ids).logits.argmax(-1)[0].tolist() == [script.target_next[t] for t in script.cycle[:40]], (
            "on the first 40 tokens of the cycle the scripted target's greedy next token should be the script's "
            "target_next of each token"
        )
        assert draft(ids).logits.argmax(-1)[0].tolist() == [script.draft_next[t] for t in script.cycle[:40]], (
            "on the first 40 tokens of the cycle the scripted draft's greedy next token should be the script's "
            "draft_next of each token"
        )


def test_a_first_build_says_so_and_a_built_pair_is_silent(tmp_path, monkeypatch, capsys):
    """A student's first test cell waits on the build: it says what it builds, once per machine."""
    monkeypatch.setenv("SPECDEC_KIT_CACHE", str(tmp_path))
    zoo.materialize("scripted")
    first = capsys.readouterr().err
    zoo.materialize("scripted")
    again = capsys.readouterr().err
    assert "building the offline pair 'scripted'" in first and "once per machine" in first, \
        f"the first build should say what it builds: {first!r}"
    assert re.search(r"built 'scripted' in \d+ s", first), f"and how long it took: {first!r}"
    assert "building" not in again, f"a pair already built should load silently: {again!r}"


def test_a_notebook_builds_its_pairs_up_front_and_skips_hub_models(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SPECDEC_KIT_CACHE", str(tmp_path))
    monkeypatch.setattr(zoo, "CHECK_PAIRS", ("scripted",))
    zoo.materialize_all([*zoo.CHECK_PAIRS, "pythia", "zoo:scripted"])
    said = capsys.readouterr().err
    assert said.count("building the offline pair") == 1 and "pythia" not in said, said
