"""The kit's own small tokenizer, shared by every offline zoo pair.

A byte-level BPE (like GPT-2's and Pythia's) trained in memory on a short fixed text, so any string
encodes and `decode` gives readable text. Like Pythia's tokenizer it has no pad token: setting one is
part of model loading, as with the real pair.
"""

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

EOS_TOKEN = "<|endoftext|>"
VOCAB_SIZE = 320

# Training text for the merges: plain English, a little code and the shapes of the kit's prompts.
_CORPUS = [
    "The future of artificial intelligence is being written by people who build tools and teach others.",
    "A small robot learned to feel joy, then sadness, and finally the quiet calm of a finished task.",
    "Happy birthday to you, happy birthday dear friend, happy birthday to you.",
    "def add(a, b):\n    return a + b\n\nfor i in range(10):\n    print(i)\n",
    "The capital of France is Paris. Water boils at one hundred degrees at sea level.",
    "Q: What is the time? A: It is late in the evening, and the lights are on in the city.",
    "1. apples 2. bread 3. cheese 4. dates 5. eggs; one, two, three, four, five, six, seven.",
]


def build_tokenizer() -> PreTrainedTokenizerFast:
    """Train the kit's byte-level BPE (deterministic: same text, same merges, same ids)."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=[EOS_TOKEN],  # id 0, as in Pythia
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_CORPUS, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, bos_token=EOS_TOKEN, eos_token=EOS_TOKEN, unk_token=EOS_TOKEN
    )
