"""Dynamic sampling (DAPO), bounded: groups with zero std on the signal reward are replaced by groups from fresh
prompts until the generation batch is full or `dynamic_sampling_max_rounds` rounds are spent.

Called from `GSPOTrainer._generate_and_score_completions` for each training generation batch. Each round is one
ordinary call of that hook (so the sampler features, the sampler's old log-probabilities and MoE route capture run
per round, on that round's rows); the rounds' rows are then merged into one batch of the usual size.

How it stays correct:
- Every process runs the same rounds with the same sizes: the decisions are computed from the signal rewards TRL
  gathers from all processes, identically on each, so no extra collective call is needed and none can hang.
- Every process keeps exactly `per_device_train_batch_size * steps_per_generation / num_generations` groups (its
  quota). A process that filled its quota early still generates in later rounds (the collectives inside TRL's
  generation need every process) and drops its surplus.
- A batch still short when the budget is spent is filled with the process's own zero-std groups from the first
  round, with their completion mask zeroed and their rows flagged (`FILLER_KEY`): they keep the shapes and the
  micro-steps, and never reach the loss. GSPOTrainer's loss counts the flagged rows out of its mean over the
  micro-batch's responses, so it averages over the kept responses only and the step's gradient keeps its scale (from
  fewer responses);
  with a loss handed to TRL, `loss_type="grpo"` counts the masked rows in its mean (the gradient shrinks by the kept
  share, as without dynamic sampling) and the token-summing types normalise by tokens, which excludes them.
- Fresh prompts come from a second, seeded pass over the training set (its own permutation per pass, the same on
  every process), so the trainer's own data order is exactly that of a run without dynamic sampling. Its position is
  saved with each checkpoint: a run resumed at a generation boundary draws the refills an uninterrupted one would.
  A prompt can appear in a refill and again in the trainer's own order.

Advantages are TRL's, computed within each round (with `scale_rewards="batch"` the std is the round's). The metrics
TRL logs per generation call (`reward`, `rewards/*`, `completions/*`) are merged over the rounds into one value over
every response generated (`merge_round_metrics`).
"""

from __future__ import annotations

import json
import math
import os

import torch

from gspo_recipes import _trl
from gspo_recipes.stats.groups import has_signal, no_signal_reward

STATE_FILE = "dynamic_sampling.json"
FILLER_KEY = "dynamic_sampling_filler"  # bool per row: a padding group's response, which the loss does not count


class RefillStream:
    """Dataset indices for refills: pass e is a permutation seeded by (seed, e); `position` counts indices taken."""

    def __init__(self, size: int, seed: int):
        self.size, self.seed, self.position = size, seed, 0

    def take(self, count: int) -> list[int]:
        out = []
        while len(out) < count:
            epoch, offset = divmod(self.position, self.size)
            generator = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
            permutation = torch.randperm(self.size, generator=generator)
            step = min(count - len(out), self.size - offset)
            out += permutation[offset : offset + step].tolist()
            self.position += step
        return out


class DynamicSampler:
    def __init__(self, trainer):
        from torch.utils.data import IterableDataset

        self.trainer = trainer
        args = trainer.args
        health = trainer.group_health
        if health.index is None:
            raise ValueError(f"dynamic_sampling=True cannot start: {no_signal_reward(health.names)}")
        if trainer.train_dataset is None or isinstance(trainer.train_dataset, IterableDataset):
            raise ValueError(
                "dynamic_sampling=True draws fresh prompts by index and needs a map-style train_dataset (a "
                "datasets.Dataset), not an IterableDataset. Materialise it, or set dynamic_sampling=False."
            )
        self.max_rounds = args.dynamic_sampling_max_rounds
        self.eps = health.eps
        self.refill = RefillStream(len(trainer.train_dataset), args.seed)
        self.filling = False  # inside `fill`: each round's hook call is a plain one
        self.last_fill: dict | None = None  # what the last generation batch did (for tests and the curious)

    def should_fill(self) -> bool:
        return self.trainer.model.training and not self.filling

    def fill(self, inputs: list[dict]) -> dict:
        t, G = self.trainer, self.trainer.num_generations
        n, rank = t.accelerator.num_processes, t.accelerator.process_index
        quota = len(inputs) // G
        outputs, signals, passes, refill_indices = [], [], [], []
        kept = [[] for _ in range(n)]  # per process: (round, group) in the order they were kept
        size, batch = quota, inputs
        store = _trl.metric_store(t)
        before, responses = {name: len(values) for name, values in store.items()}, []
        self.filling = True
        try:
            for round_ in range(self.max_rounds):
                outputs.append(t._generate_and_score_completions(batch))
                responses.append(n * size * G)
                signal = t.group_health.take_signal(G).view(n, size, G)
                passed = has_signal(signal.view(-1, G), self.eps).view(n, size)
                signals.append(signal)
                passes.append(passed)
                for p in range(n):
                    for g in passed[p].nonzero().flatten().tolist():
                        if len(kept[p]) < quota:
                            kept[p].append((round_, g))
                missing = max(quota - len(k) for k in kept)
                if missing == 0 or round_ + 1 == self.max_rounds:
                    break
                generated = sum(x.numel() for x in passes)
                rate = sum(int(x.sum()) for x in passes) / generated
                size = quota if rate == 0 else min(quota, math.ceil(missing / rate))
                indices = self.refill.take(n * size)
                refill_indices.append(indices)
                batch = self._rows(indices[rank * size : (rank + 1) * size], inputs[0].keys(), G)
        finally:
            self.filling = False
        picks = []  # per process: (round, group, masked), its kept groups then first-round fillers
        for p in range(n):
            own = [(r, g, False) for r, g in kept[p]]
            fillers = [(0, g, True) for g in (~passes[0][p]).nonzero().flatten().tolist()]
            picks.append(own + fillers[: quota - len(own)])
        output = merge_rows(outputs, [(r, g) for r, g, _ in picks[rank]], G, _trl.pad_token_id(t))
        mask = output["completion_mask"]
        masked_rows = torch.tensor([m for _, _, m in picks[rank] for _ in range(G)], device=mask.device)
        if masked_rows.any():  # fillers: in the batch for its shape, out of the loss
            output["completion_mask"] = mask * (~masked_rows).unsqueeze(1).to(mask.dtype)
        output[FILLER_KEY] = masked_rows  # split with the rows into micro-batches; the loss's count leaves them out
        if "num_items_in_batch" in outputs[0]:  # TRL's token count over every process, after the masking
            output["num_items_in_batch"] = t.accelerator.gather(_trl.loss_mask(output).sum()).sum()
        merge_round_metrics(store, before, responses)
        self._report(signals, passes, picks, refill_indices)
        return output

    def _rows(self, indices: list[int], keys, G: int) -> list[dict]:
        """Dataset rows as TRL's dataloader gives them: each prompt `G` times in a row, only the columns it passed."""
        dataset, keys = self.trainer.train_dataset, list(keys)
        rows = []
        for i in indices:
            row = dataset[i]
            rows += [{key: row[key] for key in keys if key in row} for _ in range(G)]
        return rows

    def _report(self, signals, passes, picks, refill_indices) -> None:
        t = self.trainer
        final = torch.stack([torch.stack([signals[r][p, g] for r, g, _ in picks[p]]) for p in range(len(picks))])
        masked = torch.tensor([m for pick in picks for _, _, m in pick])
        t.group_health.report(final.view(-1, final.size(-1)), masked)
        generated = sum(x.numel() for x in passes)
        stats = {
            "gspo/dynamic_sampling/rounds": len(passes),
            "gspo/dynamic_sampling/generated_groups": generated,
            "gspo/dynamic_sampling/kept_groups": int((~masked).sum()),
            "gspo/dynamic_sampling/signal_frac": sum(int(x.sum()) for x in passes) / generated,
        }
        metrics = _trl.metric_store(t)
        for name, value in stats.items():
            metrics[name].append(value)
        sections = t.__dict__.get("gspo_diagnostics_sections")
        if sections is not None:
            previous = sections.get("dynamic_sampling", {})
            sections["dynamic_sampling"] = {
                "batches": previous.get("batches", 0) + 1,
                "rounds": previous.get("rounds", 0) + len(passes),
                "generated_groups": previous.get("generated_groups", 0) + generated,
                "kept_groups": previous.get("kept_groups", 0) + int((~masked).sum()),
                "groups": previous.get("groups", 0) + int(masked.numel()),
            }
        self.last_fill = {"rounds": len(passes), "picks": picks, "refill_indices": refill_indices}

    # ------------------------------------------------------------------ checkpoints

    def save(self, folder: str) -> None:
        with open(os.path.join(folder, STATE_FILE), "w") as f:
            json.dump({"refill_position": self.refill.position}, f)

    def load(self, folder: str) -> None:
        path = os.path.join(folder, STATE_FILE)
        if os.path.exists(path):
            with open(path) as f:
                self.refill.position = int(json.load(f)["refill_position"])


def merge_round_metrics(store: dict, before: dict, responses: list[int]) -> None:
    """Replace the value each round appended to a metric by one over every response generated (the README's "TRL's
    metrics cover every generated response"): the mean weighted by each round's responses; the min or max of the
    rounds for `min`/`max` metrics; for a `std`, the std of all the responses, pooled from the rounds' means and
    stds (TRL's Bessel-corrected `nanstd`), or the weighted mean where no matching mean was logged."""
    rounds = len(responses)
    if rounds < 2:
        return
    weights = torch.tensor(responses, dtype=torch.float64)

    def new_values(name):
        values = store.get(name, [])
        added = values[before.get(name, 0) :]
        return torch.tensor(added, dtype=torch.float64) if len(added) == rounds else None

    merged = {}
    for name in list(store):
        values = new_values(name)
        if values is None:
            continue
        last = name.rsplit("/", 1)[-1]
        words = last.split("_")
        if "min" in words:
            merged[name] = values.min().item()
        elif "max" in words:
            merged[name] = values.max().item()
        elif last.endswith("std"):
            means = new_values(name[: -len("_std")] if name.endswith("_std") else name[: -len("std")] + "mean")
            merged[name] = _pooled_std(values, means, weights)
        else:
            merged[name] = ((values * weights).sum() / weights.sum()).item()
    for name, value in merged.items():
        del store[name][before.get(name, 0) :]
        store[name].append(value)


def _pooled_std(stds: torch.Tensor, means: torch.Tensor | None, counts: torch.Tensor) -> float:
    if means is None:
        return ((stds * counts).sum() / counts.sum()).item()
    mean = (means * counts).sum() / counts.sum()
    squares = ((counts - 1) * stds.nan_to_num() ** 2).sum() + (counts * (means - mean) ** 2).sum()
    return (squares / (counts.sum() - 1)).sqrt().item()


def merge_rows(outputs: list[dict], picks: list[tuple[int, int]], G: int, pad_token_id: int) -> dict:
    """One TRL batch from groups of several rounds' batches: `picks` (round, group) in order, padded to common widths
    as TRL pads (prompts on the left, completions on the right; see `_trl.ROW_LAYOUT`)."""
    merged = {}
    for key in outputs[0]:
        if key == "num_items_in_batch":
            merged[key] = outputs[0][key]
            continue
        values = [output.get(key) for output in outputs]
        if not all(isinstance(v, torch.Tensor) and v.dim() >= 1 for v in values):
            raise ValueError(
                f"dynamic_sampling cannot merge the batch field '{key}' across generation rounds (multimodal inputs "
                "are not supported). Set dynamic_sampling=False."
            )
        parts = []
        for round_, group in picks:
            rows = values[round_][group * G : (group + 1) * G]
            prompt_width = outputs[round_]["prompt_ids"].size(1)
            parts.append((rows, prompt_width))
        merged[key] = _pad_and_cat(key, parts, pad_token_id)
    return merged


def _pad_and_cat(key: str, parts: list[tuple[torch.Tensor, int]], pad_token_id: int) -> torch.Tensor:
    value = pad_token_id if key in _trl.TOKEN_ID_KEYS else _trl.ROW_PAD_VALUES.get(key, 0)
    layout = _trl.ROW_LAYOUT.get(key, "completion")
    tensors = [rows for rows, _ in parts]
    if tensors[0].dim() == 1:
        return torch.cat(tensors)
    if layout == "prompt":
        width = max(x.size(1) for x in tensors)
        return torch.cat([_pad(x, width - x.size(1), 0, value) for x in tensors])
    if layout == "sequence":  # prompt positions then completion positions
        prompt = max(p for _, p in parts)
        completion = max(x.size(1) - p for x, p in parts)
        return torch.cat([_pad(x, prompt - p, completion - (x.size(1) - p), value) for x, p in parts])
    width = max(x.size(1) for x in tensors)
    return torch.cat([_pad(x, 0, width - x.size(1), value) for x in tensors])


def _pad(x: torch.Tensor, left: int, right: int, value) -> torch.Tensor:
    if not left and not right:
        return x
    shape = list(x.shape)
    pieces = []
    if left:
        pieces.append(x.new_full([shape[0], left, *shape[2:]], value))
    pieces.append(x)
    if right:
        pieces.append(x.new_full([shape[0], right, *shape[2:]], value))
    return torch.cat(pieces, dim=1)
