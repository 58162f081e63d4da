"""GRPO and GSPO on a small Mixture-of-Experts model, with and without Routing Replay: what routing volatility does to
token and sequence ratios. Offline, CPU, a few minutes.

Model: a Qwen3-MoE (4 layers, 8 experts, top-2, hidden 64) with the project's character tokenizer, fine-tuned briefly
like the cold-start model (gspo_recipes/builtin/coldstart.py: worked answers to generated grade-school problems, with
the same shortcut flaw). Then, from that model, four arms x seeds of a short RL run (steps_per_generation=4, so
minibatches 1..4 of every rollout are 0..3 optimizer steps off-policy; reward 1 for a correct `#### N`, 0.1 for any
`#### N`):

- GRPO: token ratios, epsilon 0.2 / 0.28 (TRL's loss);
- GSPO: sequence ratios, clip range calibrated from the first rollout's off-policy log s_i (10% per side);
- each with `routing_replay=True`.

Printed per arm (means over seeds; minibatches 2-4 unless named): the share of (completion token, MoE layer) expert
sets the current router chooses differently from the old policy (the metric; under replay the forward uses the old
ones anyway), the std of the token log-ratios log r_t and of the sequence log-ratios log s_i, the clip fraction (TRL's
clip_ratio/region_mean: tokens for GRPO, responses for GSPO), and the mean reward. A PNG figure goes to --figure.
Then the metric's cost: the loss forward+backward of one minibatch, and the old-policy scoring pass, with and without
recording (interleaved repeats, medians), on the tiny MoE and on a dense tiny model.

    python benchmarks/moe_routing.py                 # ~5 minutes on 2 cores
    python benchmarks/moe_routing.py --quick         # shorter fine-tuning, 1 seed
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch

from gspo_recipes import GSPOConfig, GSPOTrainer, _trl
from gspo_recipes.builtin.coldstart import CHAT_TEMPLATE, encode_for_training, with_shortcuts
from gspo_recipes.builtin.data.synthetic_gsm import (
    extract_final_answer,
    is_correct,
    make_gsm_dataset,
    make_gsm_problems,
)
from gspo_recipes.builtin.tiny import build_model, build_tokenizer
from gspo_recipes.callbacks import RoutingVolatilityCallback
from gspo_recipes.moe import RouteRecorder, RoutingReplay, build_tiny_moe, completion_routes

ARMS = {
    "GRPO": {"importance_sampling_level": "token", "epsilon": 0.2, "epsilon_high": 0.28},
    "GRPO + replay": {
        "importance_sampling_level": "token",
        "epsilon": 0.2,
        "epsilon_high": 0.28,
        "routing_replay": True,
    },
    "GSPO": {"epsilon_calibration_steps": 4},
    "GSPO + replay": {"epsilon_calibration_steps": 4, "routing_replay": True},
}


def finetune(steps: int, seed: int = 0, num_layers: int = 4):
    tokenizer = build_tokenizer(model_max_length=256)
    tokenizer.chat_template = CHAT_TEMPLATE
    model = build_tiny_moe("qwen3_moe", seed=seed, num_layers=num_layers, hidden_size=64, vocab_size=len(tokenizer))
    model.generation_config.pad_token_id, model.generation_config.eos_token_id = 0, 2
    problems = with_shortcuts(make_gsm_problems(32 * steps, seed=seed), 0.7, seed=seed + 1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95))
    model.train()
    for step in range(steps):
        loss = model(**encode_for_training(problems[32 * step : 32 * (step + 1)], tokenizer)).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step % 100 == 0 or step == steps - 1:
            print(f"  fine-tune step {step:4d}  loss {loss.item():.3f}", flush=True)
    return model.eval(), tokenizer


def accuracy_reward(completions, answer, **kwargs):
    return [1.0 if is_correct(c, a) else 0.1 if extract_final_answer(c) else 0.0 for c, a in zip(completions, answer)]


def log_ratio_spy(trainer) -> list[dict]:
    """Per training micro-step: minibatch, token log-ratios and sequence log-ratios of its completion tokens."""
    rows, captured = [], {}
    get_logps, compute_loss = trainer._get_per_token_logps_and_entropies, trainer._compute_loss

    def get_logps_spy(*args, **kwargs):
        out = get_logps(*args, **kwargs)
        if _trl.is_loss_scoring_call(kwargs):
            captured["logps"] = out[0].detach()
        return out

    def compute_loss_spy(model, inputs):
        loss = compute_loss(model, inputs)
        mask = _trl.loss_mask(inputs).bool()
        old = inputs.get("old_per_token_logps")
        log_r = captured.pop("logps") - (old if old is not None else 0.0)
        log_s = (log_r * mask).sum(-1) / mask.sum(-1).clamp(min=1)
        row = {"minibatch": _trl.minibatch_index(trainer), "log_r": log_r[mask], "log_s": log_s}
        if row["minibatch"] > 1 and not trainer.routing_monitor.replay:
            row.update(counterfactual(trainer, inputs, mask, old))
        rows.append(row)
        return loss

    trainer._get_per_token_logps_and_entropies, trainer._compute_loss = get_logps_spy, compute_loss_spy
    return rows


def counterfactual(trainer, inputs, mask, old) -> dict:
    """The same weights scored again with the old routes replayed: the token log-ratios routing flips account for.

    Also which completion tokens had their experts changed in any MoE layer (the current router's own choice)."""
    routes = inputs[_trl.OLD_ROUTES_KEY]
    with torch.no_grad(), RoutingReplay(trainer.model, routes), RouteRecorder(trainer.model) as recorder:
        replayed, _, _ = _trl.score_completions(trainer, trainer.model, inputs)
    completion = mask.shape[1]
    current = completion_routes(recorder.routes(), completion)
    flipped = (current != completion_routes(routes, completion)).flatten(2).any(-1)
    return {"log_r_replayed": (replayed - old)[mask], "flipped": flipped[mask]}


def run_arm(model, tokenizer, dataset, settings: dict, seed: int, steps: int, output_dir: str, lr: float) -> dict:
    args = GSPOConfig(
        output_dir=output_dir,
        per_device_train_batch_size=16,
        num_generations=8,
        steps_per_generation=4,
        max_completion_length=32,
        max_steps=steps,
        learning_rate=lr,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        use_cpu=True,
        seed=seed,
        temperature=1.0,
        gradient_checkpointing=False,
        **settings,
    )
    trainer = GSPOTrainer(
        model=copy.deepcopy(model),
        reward_funcs=accuracy_reward,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
    )
    rows = log_ratio_spy(trainer)
    trainer.train()
    history = trainer.state.log_history
    later = [r for r in rows if r["minibatch"] > 1]
    result = {
        "changed_k": {k: _mean(history, f"gspo/routing/changed_frac/minibatch_{k}") for k in (1, 2, 3, 4)},
        "token_std": torch.cat([r["log_r"] for r in later]).std().item(),
        "seq_std": torch.cat([r["log_s"] for r in later]).std().item(),
        # After GSPO's calibration window (steps 1-4 run on the default 3e-4 range), for every arm alike.
        "clip": statistics.fmean(
            row["clip_ratio/region_mean"] for row in history[4:] if "clip_ratio/region_mean" in row
        ),
        "reward": _mean(history, "reward"),
        "reward_curve": [row["reward"] for row in history if "reward" in row],
        "token_std_k": {
            k: torch.cat([r["log_r"] for r in rows if r["minibatch"] == k]).std().item() for k in (2, 3, 4)
        },
        "seq_std_k": {k: torch.cat([r["log_s"] for r in rows if r["minibatch"] == k]).std().item() for k in (2, 3, 4)},
        # Share of off-policy tokens whose ratio leaves GRPO's range [0.8, 1.28]: token-ratio swings, every arm alike.
        "token_out": _outside(torch.cat([r["log_r"] for r in later]), 0.2, 0.28),
    }
    if later and "flipped" in later[0]:
        free, replayed = torch.cat([r["log_r"] for r in later]), torch.cat([r["log_r_replayed"] for r in later])
        flipped = torch.cat([r["flipped"] for r in later])
        result["counterfactual"] = {
            "flipped": flipped.float().mean().item(),
            "std_free": free.std().item(),
            "std_replayed": replayed.std().item(),
            "out_free": _outside(free, 0.2, 0.28),
            "out_replayed": _outside(replayed, 0.2, 0.28),
            "abs_flipped": free[flipped].abs().mean().item() if flipped.any() else float("nan"),
            "abs_kept": free[~flipped].abs().mean().item(),
        }
    return result


def _outside(log_r: torch.Tensor, low: float, high: float) -> float:
    ratio = log_r.exp()
    return ((ratio < 1 - low) | (ratio > 1 + high)).float().mean().item()


def _mean(history, name):
    values = [row[name] for row in history if name in row]
    return statistics.fmean(values) if values else float("nan")


def experiment(model, tokenizer, seeds, steps, lr) -> dict[str, list[dict]]:
    dataset = make_gsm_dataset(512, seed=7)
    results = {name: [] for name in ARMS}
    for seed in seeds:
        for name, settings in ARMS.items():
            start = time.perf_counter()
            results[name].append(
                run_arm(model, tokenizer, dataset, settings, seed, steps, f"/tmp/moe_routing/{seed}", lr)
            )
            print(f"  {name:14s} seed {seed}: {time.perf_counter() - start:.0f}s", flush=True)
    return results


def print_table(results) -> None:
    """Means over seeds; the spreads also with their standard deviation across seeds."""
    print(
        f"\n{'arm':14s} {'changed mb1':>11s} {'mb2':>7s} {'mb3':>7s} {'mb4':>7s} {'std log r_t':>16s} "
        f"{'std log s_i':>16s} {'r_t out':>8s} {'clip frac':>10s} {'reward':>7s}"
    )
    for name, runs in results.items():

        def avg(key, runs=runs):
            return statistics.fmean(r[key] for r in runs)

        def spread(key, runs=runs):
            values = [r[key] for r in runs]
            return f"{statistics.fmean(values):.4f}" + (f"±{statistics.stdev(values):.4f}" if len(values) > 1 else "")

        changed = [statistics.fmean(r["changed_k"][k] for r in runs) for k in (1, 2, 3, 4)]
        print(
            f"{name:14s} "
            + " ".join(f"{100 * c:6.2f}%" for c in changed).rjust(35)
            + f" {spread('token_std'):>16s} {spread('seq_std'):>16s} {100 * avg('token_out'):7.2f}%"
            + f" {avg('clip'):10.4f} {avg('reward'):7.3f}"
        )


def print_counterfactual(results) -> None:
    """Arms without replay: each off-policy minibatch scored again on the same weights with the old routes."""
    print("\nSame weights, old routes replayed (arms without replay; means over seeds; minibatches 2-4):")
    print(
        f"{'arm':8s} {'tokens flipped':>14s} {'std log r_t free':>17s} {'replayed':>9s} {'r_t out free':>13s} "
        f"{'replayed':>9s} {'|log r_t| flipped':>18s} {'kept':>7s}"
    )
    for name, runs in results.items():
        rows = [r["counterfactual"] for r in runs if "counterfactual" in r]
        if not rows:
            continue
        m = {key: statistics.fmean(row[key] for row in rows) for key in rows[0]}
        print(
            f"{name:8s} {100 * m['flipped']:13.2f}% {m['std_free']:17.4f} {m['std_replayed']:9.4f} "
            f"{100 * m['out_free']:12.2f}% {100 * m['out_replayed']:8.2f}% {m['abs_flipped']:18.4f} "
            f"{m['abs_kept']:7.4f}"
        )


def plot(results, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(19, 4))
    for name, runs in results.items():
        changed = [100 * statistics.fmean(r["changed_k"][k] for r in runs) for k in (1, 2, 3, 4)]
        axes[0].plot([1, 2, 3, 4], changed, marker="o", label=name)
        for axis, key in ((axes[1], "token_std_k"), (axes[2], "seq_std_k")):
            axis.plot([2, 3, 4], [statistics.fmean(r[key][k] for r in runs) for k in (2, 3, 4)], marker="o")
        curves = [r["reward_curve"] for r in runs]
        rollouts = range(1, min(map(len, curves)) + 1)
        axes[3].plot(rollouts, [statistics.fmean(c[i - 1] for c in curves) for i in rollouts], marker="o")
    axes[0].set(
        xlabel="minibatch (1 = on-policy)",
        ylabel="% (token, layer) expert sets changed",
        title="Routing change (router's own choice)",
    )
    axes[1].set(xlabel="minibatch", ylabel="std of log r_t", title="Token log-ratio spread")
    axes[2].set(xlabel="minibatch", ylabel="std of log s_i", title="Sequence log-ratio spread")
    axes[3].set(xlabel="rollout", ylabel="mean reward", title="Reward (means over seeds)")
    for axis in axes:
        axis.xaxis.get_major_locator().set_params(integer=True)
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"\nfigure: {path}")


def overhead_trainer(model, tokenizer, dataset, with_metric: bool, output_dir: str):
    args = GSPOConfig(
        output_dir=output_dir,
        per_device_train_batch_size=16,
        num_generations=8,
        steps_per_generation=4,
        max_completion_length=32,
        max_steps=4,
        learning_rate=1e-3,
        report_to="none",
        save_strategy="no",
        use_cpu=True,
        seed=0,
        gspo_diagnostics=False,
        gradient_checkpointing=False,
    )
    trainer = GSPOTrainer(
        model=copy.deepcopy(model),
        reward_funcs=accuracy_reward,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
    )
    if with_metric:
        trainer.add_callback(RoutingVolatilityCallback(trainer))
    start = time.perf_counter()
    trainer.train()  # one rollout of four minibatches; leaves its batch buffered (with old routes when recorded)
    return trainer, time.perf_counter() - start


def time_minibatch(trainer) -> float:
    """One training micro-step on a buffered off-policy minibatch (loss forward + backward, no generation)."""
    trainer._step = 1  # serve `_buffered_inputs[1]` without generating
    trainer.model.zero_grad()
    start = time.perf_counter()
    trainer.training_step(trainer.model, {}, None)
    return time.perf_counter() - start


def time_old_pass(trainer, record: bool) -> float:
    batch = {
        key: torch.cat([b[key] for b in trainer._buffered_inputs])
        for key in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask")
    }

    def score():
        return _trl.score_completions(trainer, trainer.model, batch, batch_size=16)

    start = time.perf_counter()
    with torch.no_grad():
        trainer.routing_monitor.record_old_pass(score) if record else score()
    return time.perf_counter() - start


def overhead(models: dict, dataset, repeats: int) -> None:
    print(f"\nMetric cost, {repeats} interleaved repeats, medians (ms)")
    print(
        f"{'model':8s} {'minibatch off':>13s} {'on':>8s} {'old pass off':>13s} {'on':>8s} {'rollout':>9s} "
        f"{'overhead':>9s}"
    )
    for label, (model, tokenizer) in models.items():
        plain, _ = overhead_trainer(model, tokenizer, dataset, False, "/tmp/moe_routing/plain")
        metric, rollout = overhead_trainer(model, tokenizer, dataset, True, "/tmp/moe_routing/metric")
        moe = getattr(metric, "routing_monitor", None) is not None
        times = {"mb_off": [], "mb_on": [], "old_off": [], "old_on": []}
        for _ in range(repeats):
            times["mb_off"].append(time_minibatch(plain))
            times["mb_on"].append(time_minibatch(metric))
            times["old_off"].append(time_old_pass(plain, False))
            times["old_on"].append(time_old_pass(metric, moe))
        med = {key: 1000 * statistics.median(values) for key, values in times.items()}
        # Per rollout: one old pass and four minibatches, against the whole rollout's time (generation included).
        extra = (med["old_on"] - med["old_off"]) + 4 * (med["mb_on"] - med["mb_off"])
        print(
            f"{label:8s} {med['mb_off']:13.1f} {med['mb_on']:8.1f} {med['old_off']:13.1f} {med['old_on']:8.1f} "
            f"{1000 * rollout:9.0f} {100 * extra / (1000 * rollout):+8.1f}%   hooks: {'yes' if moe else 'none'}"
        )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--figure", default="moe_routing.png")
    parser.add_argument("--lr", type=float, default=1e-3, help="learning rate of the RL runs (high: visible drift)")
    parser.add_argument("--skip-overhead", action="store_true")
    parser.add_argument("--layers", type=int, default=4, help="MoE layers of the model (all layers are MoE)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    finetune_steps, seeds, steps, repeats = (150, [0], 8, 5) if args.quick else (400, [0, 1, 2, 3, 4], 16, 15)
    print(f"Fine-tuning a tiny Qwen3-MoE of {args.layers} layers for {finetune_steps} steps")
    model, tokenizer = finetune(finetune_steps, num_layers=args.layers)
    print(f"RL runs: lr {args.lr}, {steps} optimizer steps, seeds {seeds}")
    results = experiment(model, tokenizer, seeds, steps, args.lr)
    print_table(results)
    print_counterfactual(results)
    plot(results, args.figure)
    if args.skip_overhead:
        return
    dense = build_model(tokenizer, hidden_size=64, num_layers=args.layers, max_position_embeddings=256)
    overhead({"dense": (dense, tokenizer), "MoE": (model, tokenizer)}, make_gsm_dataset(64, seed=8), repeats)


if __name__ == "__main__":
    main()
