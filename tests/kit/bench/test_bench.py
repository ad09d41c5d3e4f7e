"""`bench` on a tiny run: the JSON follows its schema, the figures are consistent, the files exist.
Speed itself is shown by running the benchmark, never asserted here."""

import json
import re

import jsonschema
import pytest

from specdec_kit.bench import benchmark as bench
from specdec_kit.bench import runners, sweeps
from specdec_kit.bench.machine import busy_warning, too_busy
from specdec_kit.cli import main
from specdec_kit.core.prompts import load_prompts
from specdec_kit.core.result import Acceptance, DecodeResult, acceptance, accepted_by_position
from specdec_kit.core.theory import leviathan_speedup

from conftest import REPO


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    code = main(["bench", "--pair", "tiny", "--k", "1,3", "--repeats", "2", "--limit", "2",
                 "--max-new-tokens", "12", "--threads", "2", "--out", str(out),
                 "--notebook", str(REPO / "solutions" / "speculative_decoding.ipynb")])
    assert code == 0, f"bench on the tiny pair should exit with status 0, got {code}"
    return out, json.loads((out / "bench.json").read_text())


@pytest.mark.slow
@pytest.mark.release
def test_json_follows_schema_and_files_exist(tiny_run):
    out, document = tiny_run
    bench.validate(document)
    assert (out / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", (
        f"bench.png should be a PNG file, got a file starting {(out / 'bench.png').read_bytes()[:8]!r}"
    )
    assert (out / "bench.csv").read_text().startswith("method,k,temperature,prompt_id,category,repeat"), (
        f"bench.csv should start with the header method,k,temperature,prompt_id,category,repeat, "
        f"got {(out / 'bench.csv').read_text()[:80]!r}"
    )


def test_bench_writes_its_figures_page_with_the_command_that_made_them(tiny_run):
    """bench.md: the figures once, with the command line, the machine and the table as printed."""
    out, document = tiny_run
    page = (out / "bench.md").read_text()
    assert "specdec-kit bench --pair tiny --k 1,3 --repeats 2" in page, page[:600]
    assert "Measured on " in page and "torch " in page and "![" in page and "(bench.png)" in page, page[:600]
    cached = next(e for e in document["summary"] if e["method"] == "cached" and e["k"] == 3)
    assert f"{cached['tokens_per_s']:.3f}" in page, "the page holds the printed table's figures"


def test_rows_cover_every_method_k_prompt_and_repeat(tiny_run):
    _, document = tiny_run
    keys = {(r["method"], r["k"], r["prompt_id"], r["repeat"]) for r in document["rows"]}
    assert len(keys) == len(document["rows"]) == 2 * 2 * (1 + 3 * 2), (
        "2 prompts x 2 repeats x (target greedy + 3 methods x 2 values of k) should give 28 distinct rows, "
        f"got {len(document['rows'])} rows, {len(keys)} distinct"
    )
    assert all(r["identical_to_target"] for r in document["rows"]), (
        "every method's tokens should be identical to target greedy; differing rows: "
        f"{[(r['method'], r['k'], r['prompt_id']) for r in document['rows'] if not r['identical_to_target']]}"
    )
    assert {s["method"] for s in document["summary"]} == set(runners.METHODS), (
        f"the summary should cover the methods {sorted(runners.METHODS)}, "
        f"got {sorted({s['method'] for s in document['summary']})}"
    )


def test_counts_come_from_the_models(tiny_run):
    """One target forward per round, and the cached decoder never re-sends the prompt after round one."""
    _, document = tiny_run
    for row in document["rows"]:
        if row["method"] in ("cached", "no_cache"):
            assert row["target_forwards"] == row["rounds"] == round(row["new_tokens"] / row["tokens_per_round"]), (
                f"{row['method']}, k={row['k']}: one target forward per round, and new tokens / tokens per round "
                f"rounds; got {row['target_forwards']} forwards, {row['rounds']} rounds, {row['new_tokens']} tokens "
                f"at {row['tokens_per_round']} per round"
            )
            assert row["accepted"] <= row["proposed"] and row["rejections"] <= row["rounds"], (
                f"{row['method']}, k={row['k']}: accepted drafts ({row['accepted']}) cannot exceed proposed "
                f"({row['proposed']}), nor rejections ({row['rejections']}) the rounds ({row['rounds']})"
            )
        if row["method"] == "cached":
            assert max(row["target_input_lengths"][1:]) <= row["k"] + 1, (
                f"notebook, k={row['k']}: after the prefill the cached target should be fed at most k + 1 = "
                f"{row['k'] + 1} tokens a round, got input lengths {row['target_input_lengths']}"
            )


def test_summary_figures_are_consistent(tiny_run):
    _, document = tiny_run
    for entry in document["summary"]:
        assert 0 < entry["efficiency"] <= 1, (
            f"{entry['method']}, k={entry['k']}: efficiency should lie in (0, 1], got {entry['efficiency']}"
        )
        if entry["acceptance_rate"] is not None:
            assert entry["acceptance_rate"] <= entry["alpha"] + 1e-12, "unverified drafts make the rate <= alpha"
            assert entry["predicted_speedup"] == pytest.approx(
                leviathan_speedup(entry["alpha"], entry["k"], entry["c"])), (
                f"{entry['method']}, k={entry['k']}: predicted_speedup should be Leviathan's formula for its alpha, "
                f"k and c ({leviathan_speedup(entry['alpha'], entry['k'], entry['c'])}), "
                f"got {entry['predicted_speedup']}"
            )


def test_schema_rejects_a_bad_document(tiny_run):
    _, document = tiny_run
    broken = json.loads(json.dumps(document))
    broken["rows"][0]["method"] = "magic"
    with pytest.raises(jsonschema.ValidationError):
        bench.validate(broken)


def test_acceptance_defines_alpha_and_rate_once():
    # Rounds: 4 of 4 accepted, 1 of 4 (a rejection), 2 of 3 cut short by the budget (a rejection).
    drafts = acceptance([4, 4, 3], [4, 1, 2], tokens=10, ended_at_eos=False)
    assert drafts.rate == pytest.approx(7 / 11), f"rate = accepted / proposed = 7/11, got {drafts.rate}"
    assert drafts.alpha == pytest.approx(7 / 9), f"alpha = accepted / (accepted + rejections) = 7/9, got {drafts.alpha}"
    assert drafts.tokens_per_round == pytest.approx(10 / 3), f"10 tokens in 3 rounds, got {drafts.tokens_per_round}"
    eos = acceptance([4, 4], [4, 2], tokens=7, ended_at_eos=True)
    assert (eos.rejections, eos.alpha) == (0, 1.0), f"a final round cut short by EOS is no rejection; got {eos}"
    total = drafts + eos
    assert (total.proposed, total.accepted, total.rejections) == (19, 13, 2), f"decodes add up; got {total}"


def test_nothing_proposed_gives_no_rate_anywhere():
    """The empty case has one answer for the notebook's result and the benchmark's figures: None."""
    empty = Acceptance()
    assert (empty.rate, empty.alpha, empty.tokens_per_round) == (None, None, None), empty
    result = DecodeResult("", [7], proposed=[0], accepted=[0])
    assert result.acceptance_rate is None and result.tokens_per_round == 1.0, result.acceptance()


def test_leviathan_formula():
    assert leviathan_speedup(0.0, 4, 0.1) == pytest.approx(1 / 1.4), (
        "alpha 0, k 4, c 0.1: one token per round of cost 1 + 4c, so speedup 1/1.4; "
        f"got {leviathan_speedup(0.0, 4, 0.1)}"
    )
    assert leviathan_speedup(1.0, 4, 0.0) == pytest.approx(5.0), (
        f"alpha 1, k 4, free drafts: 5 tokens per target forward, so speedup 5; got {leviathan_speedup(1.0, 4, 0.0)}"
    )


def test_plot_legend_sits_below_the_panels(tiny_run):
    """One legend for both panels, under them, so that it covers no curve; it names the theory curves too."""
    import matplotlib

    matplotlib.use("Agg")
    from specdec_kit.bench.plot import plot_bench

    figure = plot_bench(tiny_run[1])
    figure.canvas.draw()
    assert [ax.get_legend() for ax in figure.axes] == [None, None], "no legend inside a panel"
    [legend] = figure.legends
    labels = [text.get_text() for text in legend.get_texts()]
    assert any("Leviathan" in label for label in labels) and any("forward-bound" in label for label in labels), \
        f"the legend should name both theory curves: {labels}"
    top = legend.get_window_extent().y1
    bottom = min(ax.get_window_extent().y0 for ax in figure.axes)
    assert top <= bottom, f"the legend's top ({top:.0f} px) should be below the panels' bottom ({bottom:.0f} px)"


def test_the_caption_says_what_the_bars_are_over_how_many_runs_under_the_legend(tiny_run):
    import matplotlib

    matplotlib.use("Agg")
    from specdec_kit.bench.plot import plot_bench

    figure = plot_bench(tiny_run[1])
    figure.canvas.draw()
    [caption] = [t for t in figure.texts if t.get_text().startswith("Points: medians")]
    assert "25th to 75th percentile" in caption.get_text() and "2 prompts x 2 repeats, up to 12 new tokens" in \
        caption.get_text(), caption.get_text()
    assert caption.get_window_extent().y1 <= figure.legends[0].get_window_extent().y0 + 1, "caption under the legend"


def test_a_busy_machine_is_recorded_and_named_in_the_caption(tiny_run):
    from specdec_kit.bench.plot import caption

    machine = tiny_run[1]["machine"]
    assert machine["cores"] >= 1 and machine["threads"] == 2, machine
    assert {"busy_cores_before", "busy_cores_after"} <= set(machine), machine
    busy = {**tiny_run[1], "machine": {**machine, "cores": 2, "threads": 2, "busy_cores_before": 1.6,
                                       "busy_cores_after": 1.2}}  # this run's own reading, whatever the load, replaced
    assert "kept 1.6 of 2 cores busy: figures unreliable" in caption(busy)
    idle = {**tiny_run[1], "machine": {**machine, "cores": 2, "threads": 2, "busy_cores_before": 0.1,
                                       "busy_cores_after": 0.2}}
    assert "unreliable" not in caption(idle)


def test_too_busy_when_other_processes_and_the_benchmark_do_not_fit_the_cores():
    assert too_busy(1.6, 2, 2) and too_busy(0.6, 1, 1) and not too_busy(0.3, 2, 2) and not too_busy(None, 8, 1)
    warning = busy_warning(64.0, threads=2)
    assert "busier than its" in warning and "64.0 cores busy" in warning and "run the benchmark again" in warning
    assert busy_warning(0.0, threads=1) is None


def test_acceptance_by_position_counts_rounds_that_reached_each_position():
    # Rounds (proposed, accepted): (3, 3), (3, 1), (2, 0); then one decode's (1, 1).
    assert accepted_by_position([[3, 3, 2], [1]], [[3, 1, 0], [1]], 3) == [3 / 4, 1 / 3, 1 / 2]
    assert accepted_by_position([[2]], [[2]], 4) == [1.0, 1.0, None, None], "no round reached positions 3 and 4"


def test_summary_and_plot_of_acceptance_by_position(tiny_run):
    import matplotlib

    matplotlib.use("Agg")
    from specdec_kit.bench.plot import plot_acceptance_by_position

    summary = tiny_run[1]["summary"]
    for entry in summary:
        measured = entry.get("accepted_by_position")
        if entry["method"] in ("cached", "no_cache"):
            assert len(measured) == entry["k"] and all(0 <= f <= 1 for f in measured if f is not None), entry
        else:
            assert measured is None, f"{entry['method']} reports no rounds: {measured}"
    figure = plot_acceptance_by_position(tiny_run[1])
    lines = figure.axes[0].get_lines()
    assert len(lines) == 4, "k = 1 and k = 3: measured and alpha^i each"
    k3 = next(e for e in summary if e["method"] == "cached" and e["k"] == 3)
    assert list(lines[3].get_ydata()) == pytest.approx([k3["alpha"] ** i for i in (1, 2, 3)])


def test_notebook_sweep_is_short_on_a_cpu_and_caps_every_decode(solution_classes, tiny_dirs):
    cpu, gpu = sweeps.notebook_sweep("cpu"), sweeps.notebook_sweep("cuda:0")
    assert cpu.max_new_tokens and min(cpu.repeats, gpu.repeats) >= 2 and gpu.k_values[-1] > cpu.k_values[-1], (
        f"both sweeps should repeat each run (a spread to judge by), the CPU's cap its tokens and the GPU's reach "
        f"further in k, got {cpu} / {gpu}"
    )
    assert str(cpu) == "sweep: 2 prompts x k in 1, 2, 4, 12 tokens, 2 repeats", f"the sweep prints as {cpu}"
    prompts = load_prompts()[:1]
    document = bench.compare(solution_classes, *tiny_dirs, prompts, [2], repeats=1, methods=["cached"],
                             max_new_tokens=5, progress=False)
    assert {row["new_tokens"] for row in document["rows"]} == {5} and prompts[0].max_new_tokens > 5, (
        "compare(max_new_tokens=5) should cap every decode at 5 tokens, got "
        f"{sorted({row['new_tokens'] for row in document['rows']})}"
    )


def test_sampled_rows_are_paired_with_the_targets_own_sampling(tiny_dirs):
    """Speculative sampling's rows: each temperature's speedups are over target sampling at that temperature,
    tokens are not compared with greedy text, and the plot labels each temperature."""
    import matplotlib

    matplotlib.use("Agg")
    from specdec_kit.bench.plot import plot_bench
    from specdec_kit.protocol.adapters import load_decoder_classes

    classes = load_decoder_classes(REPO / "solutions" / "speculative_decoding.ipynb", ("SpeculativeSampler",))
    with pytest.raises(ValueError, match="--temperatures"):
        bench.compare(classes, *tiny_dirs, load_prompts()[:1], [2], methods=["sampling"], progress=False)
    document = bench.compare(classes, *tiny_dirs, load_prompts()[:1], [2], repeats=1, max_new_tokens=8,
                             methods=list(runners.SAMPLING_METHODS), temperatures=[0.7], progress=False)
    bench.validate(document)
    summary = {(s["method"], s["k"], s["temperature"]): s for s in document["summary"]}
    assert set(summary) == {("target_sampling", None, 0.7), ("hf_assisted_sampling", 2, 0.7),
                            ("sampling", 2, 0.7)}, sorted(summary)
    assert summary[("target_sampling", None, 0.7)]["speedup"] == 1.0, "the baseline is paired with itself"
    assert all(r["identical_to_target"] is None for r in document["rows"]), "sampled text is not compared"
    assert all(s["identical_all"] is None for s in summary.values()), "nor summarised as identical"
    labels = [t.get_text() for t in plot_bench(document).legends[0].get_texts()]
    assert "sampling (T=0.7)" in labels and "hf_assisted_sampling (T=0.7)" in labels, labels


def test_adaptive_methods_can_start_from_one_k_only():
    plan = bench.bench_plan(["target_greedy", "cached", "hf_adaptive", "adaptive"], [1, 4], adaptive_k=[4])
    assert plan == [("target_greedy", None, None), ("cached", 1, None), ("cached", 4, None),
                    ("hf_adaptive", 4, None), ("adaptive", 4, None)]


def test_hf_assisted_rows_hold_tokens_only(tiny_dirs):
    """The student package times HF assisted generation but reads no rounds off it: reading a decode's rounds off
    its target's forwards would answer the checks' counts (the instructor package's hf_methods does it)."""
    import torch

    from specdec_kit.models.loading import load_model

    target, tokenizer = load_model(tiny_dirs[0])
    draft, _ = load_model(tiny_dirs[1])
    setup = runners.Setup(target, draft, tokenizer, {}, torch.device("cpu"))
    for method in runners.HF_KWARGS:
        outcome = runners.RUNNERS[method](setup, "The capital of France is", 16, 3)
        assert len(outcome.token_ids) == 16 and outcome.proposed is None and outcome.accepted is None, \
            f"{method}: the student package's rows hold tokens only, got {outcome}"


def test_a_blank_notebooks_demo_cells_say_what_to_finish_first():
    """The release notebook run with nothing filled in: each demo cell that needs an unfinished decoder names the
    method to write and the test to pass, and no later cell fails on a name an earlier one never defined."""
    import nbformat

    from shell import shell

    notebook = nbformat.read(REPO / "assignment" / "speculative_decoding.ipynb", as_version=4)
    with shell() as run:
        outputs = run(notebook)
    demos = {name for name, cell in zip(outputs, (c for c in notebook.cells if c.cell_type == "code"))
             if "demo" in cell.metadata.get("tags", [])}
    failed = {name: output for name, output in outputs.items() if output.ename}
    assert {failed[name].ename for name in failed if name in demos} == {"NotReadyError"}, \
        {name: output.ename for name, output in failed.items()}
    assert all(failed[name].ename == "NotImplementedError" for name in failed if name not in demos), \
        {name: output.ename for name, output in failed.items()}
    for name in demos & set(failed):
        message = failed[name].error_lines()[-1]
        assert " ()" not in message and re.search(r"\w+\(\) still raises NotImplementedError. Write it and pass "
                                                  r"test_\w+ first", message), \
            f"{name} should name the method to write and the test to pass: {message}"
    bonus = {name for name, cell in zip(outputs, (c for c in notebook.cells if c.cell_type == "code"))
             if "sweeps.bonus_compare(" in cell.source}
    assert len(bonus) == 3 and not bonus & set(failed), f"the bonus parts' demos skip, failing nothing: {bonus}"
    for name in bonus:
        assert re.search(r"Skipped until it is finished: \w+ is not finished: [\w.]+\(\) still raises",
                         outputs[name].printed), f"{name} says in one line what it waits for: {outputs[name].printed}"


def test_hf_assisted_runs_print_no_notice_about_transformers_own_call(tiny_dirs):
    """transformers' assisted generation warns (once per process) about the way it calls its own draft; the kit's HF
    runs drop that line, and only that line: the same generate called directly still prints it."""
    import logging

    import torch

    seen = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())
    logger = logging.getLogger("transformers.generation.utils")
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.WARNING)  # whatever verbosity an earlier test left transformers at
    setup = bench.make_setup(*tiny_dirs, {}, torch.device("cpu"), None, [])
    try:
        logging.Logger.warning_once.cache_clear()
        runners.run_hf("hf_assisted")(setup, "The future of", 8, 2)
        kit = [m for m in seen if m.startswith(runners.INTERNAL_NOTICE)]
        logging.Logger.warning_once.cache_clear()
        ids = runners.encode(setup, "The future of")
        setup.target.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=8,
                              **runners.assisted_kwargs(setup, 2))
        direct = [m for m in seen if m.startswith(runners.INTERNAL_NOTICE)]
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    assert kit == [] and len(direct) == 1, f"the kit's run printed {kit}; a direct call {direct}"
