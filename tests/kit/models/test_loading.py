"""`specdec_kit.models.loading` on the offline zoo: names, directories, errors, devices and pairs. No network."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from specdec_kit import zoo
from specdec_kit.models import loading
from specdec_kit.models.loading import (
    DEFAULT_DRAFT,
    DEFAULT_TARGET,
    ModelNotFoundError,
    check_same_vocab,
    default_dtype,
    default_pair,
    load_model,
    load_tokenizer,
    resolve_device,
    resolve_pair,
)
from specdec_kit.zoo.tokenizer import EOS_TOKEN, VOCAB_SIZE, build_tokenizer

TARGET, DRAFT = "zoo:tiny/target", "zoo:tiny/draft"
PROMPT = "The capital of France is"


@pytest.fixture(scope="module")
def tiny_paths(tiny_dirs):
    return tuple(Path(d) for d in tiny_dirs)


@pytest.fixture(scope="module")
def tiny_target(tiny_paths):
    return load_model(TARGET, device="cpu")


@pytest.fixture
def hub_offline(monkeypatch):
    """The hub unreachable, decided from HF_HUB_OFFLINE with no connection attempted."""

    def no_network(*args, **kwargs):
        raise AssertionError(f"a network connection was attempted: {args}")

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(loading.socket, "create_connection", no_network)
    loading.hub_reachable.cache_clear()
    yield
    loading.hub_reachable.cache_clear()  # the cached False must not leak into later tests


def logits(model, tokenizer, text: str = PROMPT) -> torch.Tensor:
    with torch.inference_mode():
        return model(tokenizer(text, return_tensors="pt").input_ids).logits


# --- loading zoo models ----------------------------------------------------------------------------


def test_zoo_target_is_in_eval_mode_with_a_pad_token(tiny_paths, tiny_target):
    model, tokenizer = tiny_target
    target_dir, _ = tiny_paths
    assert not model.training, "load_model must return the model in eval mode"
    training = [name for name, module in model.named_modules() if module.training]
    assert not training, f"submodules left in training mode: {training[:5]}"
    assert model.device.type == "cpu", f"asked for cpu, got {model.device}"
    assert model.dtype == torch.float32, f"the CPU default dtype is float32, got {model.dtype}"

    assert AutoTokenizer.from_pretrained(target_dir).pad_token is None, (
        "precondition: the zoo tokenizer on disk has no pad token, like Pythia's"
    )
    assert tokenizer.pad_token is not None, "load_model must give the tokenizer a pad token"
    assert tokenizer.pad_token == tokenizer.eos_token == EOS_TOKEN, (
        f"pad should fall back to EOS {EOS_TOKEN!r}, got pad={tokenizer.pad_token!r} eos={tokenizer.eos_token!r}"
    )
    assert model.generation_config.pad_token_id == tokenizer.pad_token_id, (
        f"generation_config.pad_token_id {model.generation_config.pad_token_id} != tokenizer's "
        f"{tokenizer.pad_token_id}"
    )
    batch = tokenizer(["a", "a longer prompt"], padding=True, return_tensors="pt")
    assert batch.input_ids.shape[0] == 2, "batch padding should work once a pad token is set"


def test_zoo_draft_loads(tiny_paths):
    model, tokenizer = load_model(DRAFT, device="cpu")
    assert not model.training, "the draft must be in eval mode too"
    assert tokenizer.pad_token is not None, "the draft's tokenizer must get a pad token too"
    assert model.config.num_hidden_layers == zoo.PAIRS["tiny"].draft.layers, "zoo:tiny/draft loaded another model"


@pytest.mark.parametrize("form", ["absolute", "relative"])
def test_local_directory_loads_the_same_model(tiny_paths, tiny_target, form, monkeypatch):
    target_dir, _ = tiny_paths
    if form == "absolute":
        name = str(target_dir)
    else:
        monkeypatch.chdir(target_dir.parent)
        name = target_dir.name  # "target": a directory in the cwd, not a hub id
    model, tokenizer = load_model(name, device="cpu")
    zoo_model, zoo_tokenizer = tiny_target
    assert not model.training, f"load_model({name!r}) must return an eval-mode model"
    assert tokenizer.pad_token is not None, f"load_model({name!r}) must give the tokenizer a pad token"
    assert tokenizer.get_vocab() == zoo_tokenizer.get_vocab(), "directory and zoo name gave different tokenizers"
    assert torch.equal(logits(model, tokenizer), logits(zoo_model, zoo_tokenizer)), (
        f"load_model({name!r}) and load_model({TARGET!r}) gave different logits"
    )


def test_load_model_honours_an_explicit_dtype(tiny_paths):
    model, _ = load_model(DRAFT, device="cpu", dtype=torch.bfloat16)
    assert model.dtype == torch.bfloat16, f"dtype=bfloat16 was asked for, got {model.dtype}"


# --- vocabularies ------------------------------------------------------------------------------------


def test_check_same_vocab_passes_for_the_tiny_pair(tiny_paths):
    target_tok, draft_tok = load_tokenizer(TARGET), load_tokenizer(DRAFT)
    check_same_vocab(target_tok, draft_tok, TARGET, DRAFT)  # must not raise


def _with_added_token():
    tokenizer = build_tokenizer()
    tokenizer.add_tokens(["<extra-token>"])
    return tokenizer


def _trained_on_other_text():
    """Same size and same special token, but merges (so ids) learned from a different text."""
    text = ["Zebras quickly jumped over lazy wolves while xylophones buzzed in the quiet jungle at night."] * 4
    text += ["Mmm, 0xDEADBEEF 0xCAFEBABE ((lambda x: x ** 2) for _ in [])" * 3]
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=[EOS_TOKEN], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    backend.train_from_iterator(text, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=backend, eos_token=EOS_TOKEN)


@pytest.mark.parametrize("make_other", [_with_added_token, _trained_on_other_text], ids=["added-token", "other-text"])
def test_check_same_vocab_rejects_different_tokenizers(make_other):
    other = make_other()
    assert other.get_vocab() != build_tokenizer().get_vocab(), "precondition: the vocabularies differ"
    with pytest.raises(ValueError) as excinfo:
        check_same_vocab(build_tokenizer(), other, "zoo:tiny/target", "my-odd-draft")
    message = str(excinfo.value)
    assert "zoo:tiny/target" in message and "my-odd-draft" in message, (
        f"the error should name both models: {message}"
    )


# --- names that load nothing ---------------------------------------------------------------------------


def test_unknown_pair_lists_the_known_pairs():
    with pytest.raises(ValueError) as excinfo:
        resolve_pair("nope")
    message = str(excinfo.value)
    assert "nope" in message, f"the error should repeat the bad name: {message}"
    # whole names only: "pythia" must not count as listed because "synthetic-pythia" is
    listed = set(re.findall(r"[\w-]+", message))
    missing = [pair for pair in loading.known_pairs() if pair not in listed]
    assert not missing, f"the error should list every known pair; missing {missing}: {message}"


def test_unknown_hub_id_fails_without_trying_the_network_when_the_hub_is_unreachable(hub_offline):
    assert not loading.hub_reachable(), "HF_HUB_OFFLINE=1 should make the hub count as unreachable"
    name = "specdec-kit-tests/no-such-model"
    assert loading.model_source(name) == (name, {"local_files_only": True}), \
        f"an unreachable hub should leave only the local cache to look in, got {loading.model_source(name)}"
    with pytest.raises(ModelNotFoundError) as excinfo:
        load_model(name, device="cpu")
    message = str(excinfo.value)
    assert name in message, f"the error should name the model: {message}"
    assert "zoo" in message, f"the error should say what to do offline (use the zoo): {message}"
    assert isinstance(excinfo.value, OSError), "ModelNotFoundError should stay an OSError"


def test_missing_gguf_file(tmp_path):
    path = tmp_path / "absent.gguf"
    with pytest.raises(ModelNotFoundError, match="absent.gguf"):
        load_model(str(path), device="cpu")


@pytest.mark.parametrize("kind", ["existing-file", "missing-relative-path", "missing-absolute-path"])
def test_path_that_is_neither_directory_nor_gguf(tmp_path, monkeypatch, kind):
    monkeypatch.chdir(tmp_path)
    if kind == "existing-file":
        (tmp_path / "weights.bin").write_bytes(b"\0" * 16)
        name = "weights.bin"
    elif kind == "missing-relative-path":
        name = "./no-such-model-dir"
    else:
        name = str(tmp_path / "no-such-model-dir")
    with pytest.raises(ModelNotFoundError, match="neither a model directory nor a .gguf file"):
        load_model(name, device="cpu")


@pytest.mark.parametrize("name", ["zoo:tiny/other", "zoo:tiny", "zoo:tiny/"])
def test_bad_zoo_role(name):
    with pytest.raises(ModelNotFoundError, match="zoo:<pair>/target"):
        load_model(name, device="cpu")


def test_unknown_zoo_pair_in_a_model_name():
    with pytest.raises((ValueError, ModelNotFoundError)) as excinfo:
        load_model("zoo:nope/target", device="cpu")
    assert "tiny" in str(excinfo.value), f"the error should list the zoo's pairs: {excinfo.value}"


# --- devices, dtypes and pairs ----------------------------------------------------------------------------


def test_resolve_device_falls_back_to_cpu_without_a_gpu(caplog):
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible: cuda does not fall back")
    with caplog.at_level(logging.WARNING, logger=loading.__name__):
        device = resolve_device("cuda")
    assert device == torch.device("cpu"), f"cuda without a GPU should fall back to cpu, got {device}"
    assert any("CUDA" in record.getMessage() for record in caplog.records), "the fallback should warn"


def test_resolve_device_keeps_cpu():
    assert resolve_device("cpu") == torch.device("cpu"), f"device 'cpu' should stay cpu, got {resolve_device('cpu')}"
    assert resolve_device(torch.device("cpu")) == torch.device("cpu"), (
        f"torch.device('cpu') should stay cpu, got {resolve_device(torch.device('cpu'))}"
    )


@pytest.mark.parametrize(("device", "dtype"), [("cuda", torch.float16), ("cuda:0", torch.float16),
                                               ("cpu", torch.float32), (torch.device("cpu"), torch.float32)])
def test_default_dtype(device, dtype):
    assert default_dtype(device) == dtype, f"default_dtype({device!r}) should be {dtype}"


def test_default_pair_on_cpu():
    assert default_pair("cpu") == "synthetic-small", (
        f"the default pair on cpu should be 'synthetic-small', got {default_pair('cpu')!r}"
    )


def test_resolve_pair_names():
    assert resolve_pair("pythia") == ("EleutherAI/pythia-1.4b-deduped", "EleutherAI/pythia-160m-deduped"), (
        f"pair 'pythia' should be the 1.4b target with the 160m draft, got {resolve_pair('pythia')}"
    )
    assert resolve_pair("pythia") == (DEFAULT_TARGET, DEFAULT_DRAFT), (
        f"pair 'pythia' should be the default target and draft {(DEFAULT_TARGET, DEFAULT_DRAFT)}, "
        f"got {resolve_pair('pythia')}"
    )
    assert resolve_pair("gpt2") == ("gpt2-large", "gpt2"), (
        f"pair 'gpt2' should be target gpt2-large with draft gpt2, got {resolve_pair('gpt2')}"
    )
    assert resolve_pair("zoo:tiny") == (TARGET, DRAFT), (
        f"pair 'zoo:tiny' should be {(TARGET, DRAFT)}, got {resolve_pair('zoo:tiny')}"
    )
    assert resolve_pair("tiny") == (TARGET, DRAFT), (
        f"pair 'tiny' should be {(TARGET, DRAFT)}, got {resolve_pair('tiny')}"
    )
    for pair in zoo.pair_names():
        assert resolve_pair(pair) == (f"zoo:{pair}/target", f"zoo:{pair}/draft"), (
            f"zoo pair {pair!r} should be zoo:{pair}/target with zoo:{pair}/draft, got {resolve_pair(pair)}"
        )


def test_grading_loads_no_hub_model_and_uses_tiny(monkeypatch):
    """The guard lives in the package: a deleted or edited set-up cell cannot make grading go online."""
    monkeypatch.setenv("SPECDEC_GRADING", "1")
    with pytest.raises(ModelNotFoundError, match="grading runs offline"):
        load_model(DEFAULT_TARGET)
    assert default_pair("cuda") == "tiny", (
        f"while grading, the default pair should be 'tiny', got {default_pair('cuda')!r}"
    )
