"""Sampling and scoring for `gspo passrate`: transformers generation of `num_generations` responses per prompt, each
batch from its own seed, and the rewards called as TRL calls them (prompts, completions, completion_ids, columns)."""

from __future__ import annotations

import hashlib

import torch


def reward_names(rewards) -> list[str]:
    """The names TRL logs the rewards under (their __name__)."""
    return [getattr(r, "__name__", type(r).__name__) for r in rewards]


def batch_seed(parts) -> int:
    digest = hashlib.sha256(repr(tuple(parts)).encode()).digest()
    return int.from_bytes(digest[:8], "little") % (2**63)


class Sampler:
    def __init__(self, model, tokenizer, training_args, script_args, column: str, device):
        from gspo_recipes.recipe import as_prompt

        if isinstance(model, str):
            from transformers import AutoModelForCausalLM

            model = AutoModelForCausalLM.from_pretrained(model, **(training_args.model_init_kwargs or {}))
        self.model = model.to(device).eval()
        self.tokenizer, self.device, self.args, self.column = tokenizer, device, training_args, column
        self.chat = script_args.use_chat_template and tokenizer.chat_template is not None
        self.system_prompt = script_args.system_prompt
        self._as_prompt = as_prompt

    def prompt_of(self, example: dict):
        value = example[self.column]
        if isinstance(value, list) or self.column == "prompt":
            return value
        return self._as_prompt(value, self.system_prompt, self.chat)

    def _text(self, prompt) -> str:
        if isinstance(prompt, list):
            return self.tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
        return prompt

    @torch.no_grad()
    def generate(self, prompts: list, seed) -> tuple[list[list[str]], list[list[list[int]]]]:
        """Per prompt: `num_generations` completion texts and their token ids (eos and padding removed)."""
        a, G = self.args, self.args.num_generations
        tok = self.tokenizer
        tok.padding_side = "left"
        encoded = tok([self._text(p) for p in prompts], return_tensors="pt", padding=True, add_special_tokens=False)
        encoded = {k: v.to(self.device) for k, v in encoded.items()}
        torch.manual_seed(batch_seed(seed))
        out = self.model.generate(
            **encoded,
            do_sample=True,
            temperature=a.temperature,
            top_p=a.top_p,
            top_k=a.top_k or 0,
            max_new_tokens=a.max_completion_length,
            num_return_sequences=G,
            pad_token_id=tok.pad_token_id,
        )
        completion_ids = out[:, encoded["input_ids"].size(1) :].tolist()
        stops = {tok.eos_token_id, tok.pad_token_id}
        texts, ids = [], []
        for row in completion_ids:
            end = next((j for j, t in enumerate(row) if t in stops), len(row))
            ids.append(row[:end])
            texts.append(tok.decode(row[:end], skip_special_tokens=True))
        return [texts[i * G : (i + 1) * G] for i in range(len(prompts))], [
            ids[i * G : (i + 1) * G] for i in range(len(prompts))
        ]

    def sample_and_score(self, examples: list[dict], rewards, names: list[str], seed):
        """(samples per example, {reward name: values} per example)."""
        G = self.args.num_generations
        prompts = [self.prompt_of(e) for e in examples]
        texts, ids = self.generate(prompts, seed)
        flat_prompts = [p for p in prompts for _ in range(G)]
        chat = isinstance(prompts[0], list)
        flat = [t for group in texts for t in group]
        completions = [[{"role": "assistant", "content": t}] for t in flat] if chat else flat
        columns = {
            k: [e[k] for e in examples for _ in range(G)] for k in examples[0] if k not in ("prompt", "completion")
        }
        scores = []
        per_reward = {}
        for reward, name in zip(rewards, names):
            values = reward(
                prompts=flat_prompts, completions=completions, completion_ids=[i for g in ids for i in g], **columns
            )
            per_reward[name] = [None if v is None else float(v) for v in values]
        for i in range(len(examples)):
            scores.append({name: values[i * G : (i + 1) * G] for name, values in per_reward.items()})
        return texts, scores
