"""GGUF round trip: a tiny GPT-2 written with `gguf.GGUFWriter` loads through `specdec_kit.models.loading.load_model`.

The file is written the way llama.cpp's converter writes a GPT-2: llama.cpp tensor names, the Conv1D
weights (`c_attn`, `c_proj`, `c_fc`) transposed to (out, in), and the kit's own byte-level BPE as a
"gpt2" tokenizer in the metadata. The loaded model must then reproduce the torch model it came from.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from specdec_kit.models.loading import load_model
from specdec_kit.zoo.tokenizer import EOS_TOKEN, build_tokenizer

gguf = pytest.importorskip("gguf")


ATOL = 1e-4  # an fp32 file holds the weights exactly; this only allows for summation-order noise
PROMPT = "The capital of France is Paris. def add(a, b):"
MAX_NEW_TOKENS = 16


def tiny_gpt2(vocab_size: int, eos_id: int, seed: int) -> GPT2LMHeadModel:
    """A seeded random GPT-2: 2 layers, width 64, 4 heads, untied output embedding."""
    torch.manual_seed(seed)
    config = GPT2Config(
        vocab_size=vocab_size, n_embd=64, n_layer=2, n_head=4,
        n_positions=1024,  # transformers reads no position count from a gpt2 GGUF: keep GPT2Config's default
        bos_token_id=eos_id, eos_token_id=eos_id, tie_word_embeddings=False,
    )
    model = GPT2LMHeadModel(config).eval()
    model.generation_config.pad_token_id = eos_id
    return model


def write_gguf(model: GPT2LMHeadModel, tokenizer, path) -> None:
    """Write `model` and `tokenizer` as an all-fp32 GGUF file, as llama.cpp's convert_hf_to_gguf does."""
    backend = json.loads(tokenizer.backend_tokenizer.to_str())
    vocab, merges = backend["model"]["vocab"], backend["model"]["merges"]
    tokens = sorted(vocab, key=vocab.get)
    assert [vocab[t] for t in tokens] == list(range(len(tokens))), "tokenizer ids are not 0..V-1"
    special = {added["content"] for added in backend["added_tokens"] if added["special"]}
    eos_id = vocab[EOS_TOKEN]

    config = model.config
    writer = gguf.GGUFWriter(str(path), "gpt2")
    writer.add_name("specdec-kit-tiny-gpt2")
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_context_length(config.n_positions)
    writer.add_embedding_length(config.n_embd)
    writer.add_block_count(config.n_layer)
    writer.add_feed_forward_length(4 * config.n_embd)
    writer.add_head_count(config.n_head)
    writer.add_layer_norm_eps(config.layer_norm_epsilon)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(tokens)
    writer.add_token_types([gguf.TokenType.CONTROL if t in special else gguf.TokenType.NORMAL for t in tokens])
    writer.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in merges])
    writer.add_bos_token_id(eos_id)
    writer.add_eos_token_id(eos_id)

    state = {name: t.detach().to(torch.float32).numpy() for name, t in model.state_dict().items()}

    def add(gguf_name: str, hf_name: str, transpose: bool = False) -> None:
        array = state[hf_name].T if transpose else state[hf_name]
        writer.add_tensor(gguf_name, np.ascontiguousarray(array, dtype=np.float32))

    add("token_embd.weight", "transformer.wte.weight")
    add("position_embd.weight", "transformer.wpe.weight")
    for i in range(config.n_layer):
        hf, blk = f"transformer.h.{i}.", f"blk.{i}."
        for gguf_part, hf_part, is_conv1d in [
            ("attn_norm", "ln_1", False),
            ("attn_qkv", "attn.c_attn", True),  # q, k, v fused, as in GPT-2 itself
            ("attn_output", "attn.c_proj", True),
            ("ffn_norm", "ln_2", False),
            ("ffn_up", "mlp.c_fc", True),
            ("ffn_down", "mlp.c_proj", True),
        ]:
            add(f"{blk}{gguf_part}.weight", f"{hf}{hf_part}.weight", transpose=is_conv1d)
            add(f"{blk}{gguf_part}.bias", f"{hf}{hf_part}.bias")
    add("output_norm.weight", "transformer.ln_f.weight")
    add("output_norm.bias", "transformer.ln_f.bias")
    add("output.weight", "lm_head.weight")

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


@pytest.fixture(scope="module")
def kit_tokenizer():
    return build_tokenizer()


@pytest.fixture(scope="module")
def original(kit_tokenizer):
    return tiny_gpt2(len(kit_tokenizer), kit_tokenizer.eos_token_id, seed=0)


@pytest.fixture(scope="module")
def gguf_path(original, kit_tokenizer, tmp_path_factory):
    path = tmp_path_factory.mktemp("gguf") / "tiny-gpt2-f32.gguf"
    write_gguf(original, kit_tokenizer, path)
    return path


@pytest.fixture(scope="module")
def loaded(gguf_path):
    return load_model(str(gguf_path), device="cpu")


def test_loaded_model_is_in_eval_mode(loaded):
    model, _ = loaded
    assert not model.training, "load_model must return the model in eval mode"
    training = [name for name, module in model.named_modules() if module.training]
    assert not training, f"submodules left in training mode (dropout active): {training[:5]}"
    assert model.dtype == torch.float32, f"an fp32 GGUF on the CPU should load as float32, got {model.dtype}"
    assert model.device.type == "cpu", f"asked for cpu, got {model.device}"


def test_loaded_tokenizer_has_pad_token_and_matches_the_kit_tokenizer(loaded, kit_tokenizer):
    _, tokenizer = loaded
    assert tokenizer.pad_token is not None, "the tokenizer from a GGUF without a pad token must get one"
    assert tokenizer.pad_token_id == kit_tokenizer.eos_token_id, (
        f"pad should fall back to EOS (id {kit_tokenizer.eos_token_id}), got id {tokenizer.pad_token_id}"
    )
    assert tokenizer.get_vocab() == kit_tokenizer.get_vocab(), "the GGUF tokenizer's vocabulary differs from the kit's"
    for text in [PROMPT, "Happy birthday to you", "  leading spaces\nand a newline", "ünïcödé ✓"]:
        expected = kit_tokenizer.encode(text)
        got = tokenizer.encode(text)
        assert got == expected, f"GGUF tokenizer encodes {text!r} as {got}, the kit tokenizer as {expected}"
        assert tokenizer.decode(got) == text, f"GGUF tokenizer does not decode {text!r} back to itself"


def test_logits_match_the_original_model(loaded, original, kit_tokenizer):
    model, _ = loaded
    ids = kit_tokenizer(PROMPT, return_tensors="pt").input_ids
    with torch.inference_mode():
        expected = original(ids).logits
        got = model(ids).logits
    assert got.shape == expected.shape, f"logits shape {tuple(got.shape)} != original {tuple(expected.shape)}"
    err = (got - expected).abs().max().item()
    assert err <= ATOL, f"GGUF model logits differ from the original torch model by {err:.3g} (atol {ATOL})"


def test_greedy_generate_matches_the_original_model(loaded, original, kit_tokenizer):
    model, tokenizer = loaded
    enc = tokenizer(PROMPT, return_tensors="pt")
    kwargs = dict(max_new_tokens=MAX_NEW_TOKENS, min_new_tokens=MAX_NEW_TOKENS, do_sample=False)
    with torch.inference_mode():
        expected = original.generate(**enc, **kwargs)
        got = model.generate(**enc, **kwargs)
    assert got.tolist() == expected.tolist(), (
        f"greedy tokens differ:\n GGUF:     {got[0, enc.input_ids.shape[1]:].tolist()}\n"
        f" original: {expected[0, enc.input_ids.shape[1]:].tolist()}"
    )


def test_gguf_path_is_not_shadowed_by_a_file_of_the_same_name_in_the_cwd(
        gguf_path, original, kit_tokenizer, tmp_path, monkeypatch):
    """Loading dir/x.gguf while the working directory holds another x.gguf must load dir/x.gguf."""
    decoy = tiny_gpt2(len(kit_tokenizer), kit_tokenizer.eos_token_id, seed=1)
    write_gguf(decoy, kit_tokenizer, tmp_path / gguf_path.name)
    monkeypatch.chdir(tmp_path)
    ids = kit_tokenizer(PROMPT, return_tensors="pt").input_ids

    model, _ = load_model(str(gguf_path), device="cpu")
    with torch.inference_mode():
        err = (model(ids).logits - original(ids).logits).abs().max().item()
    assert err <= ATOL, (
        f"load_model({str(gguf_path)!r}) returned other weights (logits off by {err:.3g}): "
        f"it loaded ./{gguf_path.name} from the working directory instead"
    )

    model, _ = load_model(gguf_path.name, device="cpu")  # a bare relative name means the cwd's file
    with torch.inference_mode():
        err = (model(ids).logits - decoy(ids).logits).abs().max().item()
    assert err <= ATOL, f"load_model({gguf_path.name!r}) did not load the file in the working directory"
