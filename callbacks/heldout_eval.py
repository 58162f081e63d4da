"""HeldoutEvalCallback: pass@1, pass@k, maj@k and greedy accuracy on held-out prompts, under a stricter grader.

TRL evaluates a GRPO run only with its training rewards, so a reward that is being gamed looks like progress. This
callback scores prompts the run never trains on with a grader the training reward does not decide, every
`eval_steps` optimizer steps and at the last step:

    trainer.add_callback(HeldoutEvalCallback(trainer, heldout_dataset))

For each of at most `max_prompts` held-out rows it generates one greedy and `num_samples` (k) sampled completions
with the model being trained, under the trainer's generation settings (temperature, top_p, top_k, min_p,
repetition_penalty, max_completion_length, generation_kwargs), scores them, and logs

    heldout/{reward}/pass@1, heldout/{reward}/pass@{k}  (the unbiased estimator over the k samples)
    heldout/{reward}/maj@{k}                            (math graders only: majority vote over the final answers)
    heldout/{reward}/greedy, heldout/mean_length (sampled completions, tokens), heldout/seconds

It also evaluates once before the first step of a fresh run: the start of every held-out series, in the
`heldout_start` section of the first diagnostics line (step 0 in `gspo report`; trackers get no step 0). Each
evaluation goes, with a few prompts' samples, into the `heldout` section of that step's diagnostics line (needs
`gspo_diagnostics`, whose LogRatioHistogramCallback writes the file). It never makes the Trainer log: it evaluates
at the first log on or after each multiple of `eval_steps` (and at the last step), so its figures carry the step of a
log that happens anyway, and every other window (the `gspo/` statistics, TRL's metrics, the entropy check's) is the
same with or without held-out evaluation.

Graders: `reward_funcs` (registry names or callables); by default the strict final-answer graders for maths
(`gsm8k_accuracy` for GSM8K's `#### N` answers, `math_accuracy` for a `solution` or `answer` column) or the code
judge (`code_execution`, for `tests` or `io_tests`), chosen from the dataset's columns. A grader that raises or
returns None scores 0 (fail closed), with one warning per grader.

Several processes: the rows are cut into fixed chunks of `chunk_prompts`, dealt out round-robin, generated with a
seed per (run seed, step, chunk) and gathered, so every process computes the same figures, equal to a
one-process run's. The training RNG is left untouched (generation runs in a forked RNG).

With `use_vllm`, the evaluation still generates with transformers on the trained model (not on the vLLM engine),
which is slower but scores exactly the weights being trained. DeepSpeed ZeRO-3 parameters are gathered for
generation as TRL does (`ds3_gather_for_generation=True` is required); FSDP is untested.

The reward-hacking health check (`gspo_recipes.stats.heldout.DivergenceJudge`) compares the held-out pass@1 of the
first grader with the training reward since the previous evaluation and warns when they diverge; its series is
saved with each checkpoint (`heldout_eval.json`), so a resumed run judges as an uninterrupted one would.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import time

import torch
from transformers import TrainerCallback

from gspo_recipes._trl import add_to_trainer_logs, record_resumed_checkpoint, resumed_checkpoint
from gspo_recipes.rewards import get_reward
from gspo_recipes.rewards.math.graders import final_answer_key
from gspo_recipes.rewards.text import completion_text
from gspo_recipes.runfiles.run_warnings import record_warning
from gspo_recipes.stats.heldout import DivergenceJudge, heldout_scores
from gspo_recipes.stats.response_stats import checkpoint_folder, window_ends

logger = logging.getLogger(__name__)

STATE_FILE = "heldout_eval.json"
SAMPLES_KEPT = 4  # prompts whose completions go into the diagnostics line, to inspect when the warning fires
START_SECTION = "heldout_start"  # the evaluation before training, in the first diagnostics line
MAJORITY_GRADERS = ("gsm8k_accuracy", "math_accuracy")  # strict graders whose final answers compare


def default_heldout_rewards(column_names) -> list[str]:
    """The strict grader for a dataset, from its columns; an error naming the columns when none fits."""
    columns = set(column_names)
    if columns & {"tests", "io_tests", "test_list", "test", "input_output"}:  # the code judge's columns
        return ["code_execution"]
    if "solution" in columns:
        return ["math_accuracy"]
    if "answer" in columns:
        return ["gsm8k_accuracy"] if "question" in columns else ["math_accuracy"]
    raise ValueError(
        f"held-out evaluation: no default grader for columns {sorted(columns)}; the math graders read 'answer' "
        "(GSM8K: with 'question') or 'solution', the code judge 'tests', 'io_tests', "
        "'test_list', 'test' or 'input_output'. Map a column (--column_map) "
        "or name the graders (heldout_rewards)."
    )


class HeldoutEvalCallback(TrainerCallback):
    """Held-out pass@1 / pass@k / maj@k / greedy accuracy, and the reward-hacking warning.

    Args:
        trainer: the `GRPOTrainer` (or `GSPOTrainer`) being trained.
        dataset: held-out rows with a `prompt` column and the graders' columns. Never pass training rows.
        reward_funcs: graders (registry names or callables); None: `heldout_rewards` of the config, else the
            default strict grader for the dataset's columns.
        eval_steps: evaluate at the first log on or after every this many optimizer steps (and at the last); None:
            `heldout_eval_steps`.
        num_samples: k, sampled completions per prompt; None: `heldout_num_samples`.
        max_prompts: evaluate the first this many rows; None: `heldout_max_prompts`.
        chunk_prompts: prompts per generate call (results do not depend on the number of processes).
        judge: the divergence check (a `DivergenceJudge`); None: its defaults.
    """

    def __init__(self, trainer, dataset, reward_funcs=None, eval_steps: int | None = None,
                 num_samples: int | None = None, max_prompts: int | None = None, chunk_prompts: int = 16,
                 judge: DivergenceJudge | None = None):  # fmt: skip
        args = trainer.args
        if getattr(trainer, "is_deepspeed_enabled", False) and not args.ds3_gather_for_generation:
            raise ValueError(
                "HeldoutEvalCallback with ds3_gather_for_generation=False: the processes evaluate different numbers "
                "of prompts, which ZeRO-3's sharded forward passes cannot do; set ds3_gather_for_generation=True."
            )
        self.trainer = trainer
        record_resumed_checkpoint(trainer)  # the judge's series comes back from the checkpoint train() resumes from
        self.eval_steps = eval_steps or getattr(args, "heldout_eval_steps", 0) or 50
        self.num_samples = num_samples or getattr(args, "heldout_num_samples", 4)
        max_prompts = max_prompts or getattr(args, "heldout_max_prompts", 32)
        if "prompt" not in dataset.column_names:
            raise ValueError(f"held-out dataset has no 'prompt' column; its columns: {list(dataset.column_names)}")
        self.rows = [dict(row) for row in dataset.select(range(min(max_prompts, len(dataset))))]
        names = reward_funcs or getattr(args, "heldout_rewards", None) or default_heldout_rewards(dataset.column_names)
        self.graders = [(_name(spec), get_reward(spec) if isinstance(spec, str) else spec) for spec in names]
        self.chunk_prompts = chunk_prompts
        self.judge = judge or DivergenceJudge()
        self.warned_graders: set[str] = set()
        self.last_eval_step = 0

    # -- schedule and state -------------------------------------------------------------------------------------

    def on_train_begin(self, args, state, control, **kwargs):
        self.last_eval_step = state.global_step
        if state.global_step == 0:  # where the policy starts: without it a rise or a fall has no baseline
            _, section = self.evaluate(0)
            self.trainer.__dict__.setdefault("gspo_diagnostics_sections", {})[START_SECTION] = section
        path = os.path.join(resumed_checkpoint(self.trainer) or checkpoint_folder(args, state), STATE_FILE)
        if state.global_step > 0 and os.path.exists(path):
            with open(path) as f:
                saved = json.load(f)
            self.judge.load_state_dict(saved["judge"])
            self.last_eval_step = saved["last_eval_step"]

    def on_save(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            folder = checkpoint_folder(args, state)
            os.makedirs(folder, exist_ok=True)
            with open(os.path.join(folder, STATE_FILE), "w") as f:
                json.dump({"judge": self.judge.state_dict(), "last_eval_step": self.last_eval_step}, f)

    def on_step_end(self, args, state, control, **kwargs):
        step = state.global_step
        due = step // self.eval_steps > self.last_eval_step // self.eval_steps or step >= state.max_steps
        if not (due and window_ends(state, control)):  # a log this callback forced would split the others' windows
            return
        metrics, section = self.evaluate(step)
        train = training_reward(state.log_history, self.last_eval_step, self.graders[0][0], self.trainer)
        section["train_reward"] = train
        self.last_eval_step = step
        add_to_trainer_logs(self.trainer, metrics)
        self.trainer.__dict__.setdefault("gspo_diagnostics_sections", {})["heldout"] = section
        first = self.graders[0][0]
        verdict = self.judge.observe(step, train, section["rewards"][first]["pass@1"], section["prompts"])
        if verdict is not None:
            self._warn_divergence(first, verdict)

    def _warn_divergence(self, grader: str, verdict: str) -> None:
        message = (
            f"GSPO health: reward hacking? On the held-out prompts, {verdict}, graded by {grader}. The policy may be "
            "learning what the training reward pays rather than the task. Inspect samples: the completions in the "
            "'heldout' section of gspo_diagnostics.jsonl at these steps, the training completions "
            "(log_completions=True), `gspo audit-reward REWARD --data FILE` on the training reward; then make the "
            "training reward stricter (the final-answer contract, the code judge) or fix what it pays for."
        )
        if self.trainer.accelerator.is_main_process:
            logger.warning(message)
        record_warning(self.trainer, "heldout_divergence", message)

    # -- one evaluation -----------------------------------------------------------------------------------------

    def evaluate(self, step: int) -> tuple[dict, dict]:
        """Generate, grade and gather; (metrics to log, the diagnostics section). Every process must call it."""
        start = time.perf_counter()
        accelerator = self.trainer.accelerator
        chunks = [list(range(i, min(i + self.chunk_prompts, len(self.rows))))
                  for i in range(0, len(self.rows), self.chunk_prompts)]  # fmt: skip
        mine = [chunk for j, chunk in enumerate(chunks) if j % accelerator.num_processes == accelerator.process_index]
        local = []
        for chunk in mine:  # each chunk's seed depends on the chunk, not on the process that draws it
            local.extend(self._evaluate_chunk(chunk, hash_seed(self.trainer.args.seed, step, chunk[0])))
        if accelerator.num_processes > 1:
            from accelerate.utils import gather_object

            local = gather_object(local)
        results = sorted(local, key=lambda result: result["index"])
        k = self.num_samples
        section = {"step": step, "prompts": len(results), "num_samples": k, "rewards": {}}
        metrics = {}
        for name, _ in self.graders:
            answers = [r["answers"][name] for r in results] if name in MAJORITY_GRADERS else None
            scores = heldout_scores([r["sampled"][name] for r in results], [r["greedy"][name] for r in results], k,
                                    answers)  # fmt: skip
            section["rewards"][name] = scores
            metrics.update({f"heldout/{name}/{metric}": value for metric, value in scores.items()})
        lengths = [length for r in results for length in r["lengths"]]
        section["mean_length"] = metrics["heldout/mean_length"] = sum(lengths) / max(1, len(lengths))
        section["samples"] = [
            {key: r[key] for key in ("prompt", "greedy_text", "sampled_text", "sampled", "greedy")}
            for r in results[:SAMPLES_KEPT]
        ]
        section["seconds"] = metrics["heldout/seconds"] = time.perf_counter() - start
        return metrics, section

    def _evaluate_chunk(self, indices: list[int], seed: int) -> list[dict]:
        rows = [self.rows[i] for i in indices]
        greedy_ids = self._generate([row["prompt"] for row in rows], greedy=True, seed=seed)
        sampled_ids = self._generate([row["prompt"] for row in rows], greedy=False, seed=seed)
        k = self.num_samples
        greedy_texts = [self._decode(ids) for ids in greedy_ids]
        sampled_texts = [self._decode(ids) for ids in sampled_ids]
        greedy_scores = self._grade(rows, greedy_texts, 1)
        sampled_scores = self._grade(rows, sampled_texts, k)
        results = []
        for p, (index, row) in enumerate(zip(indices, rows)):
            result = {"index": index, "prompt": _prompt_text(row["prompt"]), "greedy_text": greedy_texts[p],
                      "sampled_text": sampled_texts[p * k : (p + 1) * k],
                      "lengths": [len(ids) for ids in sampled_ids[p * k : (p + 1) * k]],
                      "greedy": {}, "sampled": {}, "answers": {}}  # fmt: skip
            for name, _ in self.graders:
                result["greedy"][name] = greedy_scores[name][p]
                result["sampled"][name] = sampled_scores[name][p * k : (p + 1) * k]
                if name in MAJORITY_GRADERS:
                    texts = result["sampled_text"]
                    result["answers"][name] = [final_answer_key(name, text, row) for text in texts]
            results.append(result)
        return results

    def _generate(self, prompts: list, greedy: bool, seed: int) -> list[list[int]]:
        """Completion token ids (up to the first EOS), `num_samples` per prompt when sampling, one when greedy."""
        from trl.models import unwrap_model_for_generation

        trainer, tokenizer = self.trainer, _tokenizer(self.trainer)
        config = generation_config(trainer, tokenizer)
        config.do_sample = not greedy
        config.num_return_sequences = 1 if greedy else self.num_samples
        if greedy:
            config.temperature, config.top_p, config.top_k, config.min_p = None, None, None, None
        inputs = _tokenized_prompts(trainer, tokenizer, prompts)
        model = trainer.model_wrapped if hasattr(trainer, "model_wrapped") else trainer.model
        device = trainer.accelerator.device
        was_training = trainer.model.training
        devices = [device] if device.type == "cuda" else []
        try:
            gather = trainer.args.ds3_gather_for_generation
            unwrapping = unwrap_model_for_generation(model, trainer.accelerator, gather_deepspeed3_params=gather)
            with unwrapping as unwrapped, torch.no_grad(), torch.random.fork_rng(devices=devices):
                torch.manual_seed(seed)
                unwrapped.eval()
                output = unwrapped.generate(**{key: value.to(device) for key, value in inputs.items()},
                                            generation_config=config)  # fmt: skip
        finally:
            trainer.model.train(was_training)
        completions = output[:, inputs["input_ids"].shape[1] :].tolist()
        stops = set(_as_list(config.eos_token_id)) | {tokenizer.pad_token_id}
        return [_until_stop(ids, stops) for ids in completions]

    def _decode(self, ids: list[int]) -> str:
        return _tokenizer(self.trainer).decode(ids, skip_special_tokens=True)

    def _grade(self, rows: list[dict], texts: list[str], per_prompt: int) -> dict[str, list[float]]:
        """Each grader's scores for the texts (`per_prompt` per row, in order); failures score 0 (fail closed)."""
        conversational = isinstance(rows[0]["prompt"], list)
        completions = [[{"role": "assistant", "content": t}] for t in texts] if conversational else texts
        columns = {key: [row[key] for row in rows for _ in range(per_prompt)] for key in rows[0] if key != "prompt"}
        prompts = [row["prompt"] for row in rows for _ in range(per_prompt)]
        scores = {}
        for name, grader in self.graders:
            try:
                raw = list(grader(prompts=prompts, completions=completions, **columns))
                problem = "returned None for some completions" if any(s is None for s in raw) else None
            except Exception as error:  # a grader that fails must not pass anything, nor stop training
                raw, problem = [None] * len(texts), f"raised {type(error).__name__}: {error}"
            if problem and name not in self.warned_graders:
                self.warned_graders.add(name)
                logger.warning("held-out grader %s %s; those completions score 0 (fail closed).", name, problem)
            scores[name] = [0.0 if s is None else float(s) for s in raw]
        return scores


# ----------------------------------------------------------------------------------------------------------------


def training_reward(log_history: list[dict], since_step: int, grader: str, trainer) -> float | None:
    """The mean training reward of the steps after `since_step` (those logged, and the window logged at this step):
    the grader's own reward when the run trains on it, else the total reward; None when there is none."""
    from gspo_recipes._trl import metric_store

    key = f"rewards/{grader}/mean" if grader in getattr(trainer, "reward_func_names", []) else "reward"
    values = [entry[key] for entry in log_history if entry.get("step", 0) > since_step and entry.get(key) is not None]
    pending = metric_store(trainer).get(key) or []  # this step's window: logged after the callbacks' on_step_end
    values += [sum(pending) / len(pending)] if pending else []
    return sum(values) / len(values) if values else None


def generation_config(trainer, tokenizer):
    """The trainer's sampling settings (its GenerationConfig; built from the args where TRL keeps none, as with
    vLLM)."""
    from transformers import GenerationConfig

    if getattr(trainer, "generation_config", None) is not None:
        return copy.deepcopy(trainer.generation_config)
    args = trainer.args
    return GenerationConfig(max_new_tokens=args.max_completion_length, do_sample=True, temperature=args.temperature,
                            top_p=args.top_p, top_k=args.top_k, min_p=args.min_p,
                            repetition_penalty=args.repetition_penalty, pad_token_id=tokenizer.pad_token_id,
                            eos_token_id=tokenizer.eos_token_id, **(args.generation_kwargs or {}))  # fmt: skip


def hash_seed(seed: int, step: int, chunk: int) -> int:
    return (seed * 1_000_003 + step * 10_007 + chunk) % (2**31)


def _tokenized_prompts(trainer, tokenizer, prompts: list) -> dict:
    if isinstance(prompts[0], list):
        texts = [tokenizer.apply_chat_template(prompt, chat_template=getattr(trainer, "chat_template", None),
                                               add_generation_prompt=True, tokenize=False,
                                               **(getattr(trainer, "chat_template_kwargs", None) or {}))
                 for prompt in prompts]  # fmt: skip
        special = False  # the template writes the special tokens
    else:
        texts, special = prompts, True  # as TRL tokenizes plain-text prompts
    padding_side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    try:
        return dict(tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=special))
    finally:
        tokenizer.padding_side = padding_side


def _tokenizer(trainer):
    return getattr(trainer, "_tokenizer", None) or trainer.processing_class


def _until_stop(ids: list[int], stops: set) -> list[int]:
    for position, token in enumerate(ids):
        if token in stops:
            return ids[:position]
    return ids


def _as_list(value) -> list:
    return [] if value is None else list(value) if isinstance(value, (list, tuple)) else [value]


def _prompt_text(prompt) -> str:
    return prompt if isinstance(prompt, str) else "\n".join(completion_text(message) for message in prompt)


def _name(spec) -> str:
    return spec if isinstance(spec, str) else getattr(spec, "__name__", type(spec).__name__)
