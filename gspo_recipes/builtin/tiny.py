"""A tiny causal LM and its tokenizer, built offline in code: for tests, benchmarks and the embedded default recipe.

The tokenizer is character-level over printable ASCII (built with `tokenizers`, wrapped in
`PreTrainedTokenizerFast`), so any English or maths text round-trips and the vocabulary stays under 110 entries.
The model is a Qwen2-style decoder from a config: with the defaults it has about 100k parameters and runs a GRPO
step on CPU in well under a second.
"""

from __future__ import annotations

import string

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

PAD, BOS, EOS, UNK = "<pad>", "<s>", "</s>", "<unk>"
CHARACTERS = string.printable  # digits, letters, punctuation, space, \t \n \r \x0b \x0c

# A minimal chat template, so that conversational datasets (lists of {"role", "content"}) work with the tiny model.
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}"
)


def build_tokenizer(model_max_length: int = 1024) -> PreTrainedTokenizerFast:
    """A character-level tokenizer: one token per printable ASCII character, plus pad, bos, eos and unk."""
    vocab = {tok: i for i, tok in enumerate([PAD, BOS, EOS, UNK])}
    for ch in CHARACTERS:
        vocab.setdefault(ch, len(vocab))
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    core.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    core.decoder = decoders.Fuse()  # join characters back without spaces
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token=PAD,
        bos_token=BOS,
        eos_token=EOS,
        unk_token=UNK,
        model_max_length=model_max_length,
        padding_side="left",  # generation pads prompts on the left
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_model(
    tokenizer: PreTrainedTokenizerFast,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    intermediate_size: int | None = None,
    max_position_embeddings: int = 1024,
    seed: int = 0,
) -> Qwen2ForCausalLM:
    """A freshly initialised Qwen2-style causal LM sized for CPU."""
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size or 2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=max(1, num_heads // 2),
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model


def build_tiny_model_and_tokenizer(**model_kwargs) -> tuple[Qwen2ForCausalLM, PreTrainedTokenizerFast]:
    """The untrained tiny model and its tokenizer, in well under a second, with no network."""
    tokenizer = build_tokenizer(model_max_length=model_kwargs.get("max_position_embeddings", 1024))
    return build_model(tokenizer, **model_kwargs), tokenizer
