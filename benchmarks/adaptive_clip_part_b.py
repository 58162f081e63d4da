"""Part B of benchmarks/adaptive_clip.py: the embedded GSM8K default (recipes/configs/gsm8k_gspo_offline.yaml, the
cold-start model, its shipped calibrated range), fixed vs adaptive range, with and without a step of the learning
rate (x`--drift-factor`, 2 by default) at `--drift-step`, over `--seeds` seeds. Per run: the per-side shares of
the off-policy responses clipped (A < 0 below 1 - epsilon_low, A > 0 above 1 + epsilon_high) per optimizer step,
the training reward (TRL's batch reward), the held-out pass@1 at the end (the recipe's held-out evaluation: 32
generated problems, greedy, strict grader), and the controller's time (recording and deciding) against the step time.

Checks, printed with their figures: after the drift the adaptive arm's mean per-side share lies in [5%, 20%] and the
fixed arm's leaves it (else the drift is too weak and the comparison says nothing); without drift the adaptive arm's
last-50-step reward is within the seeds' spread of the fixed arm's and its pass@1 within 2 of 32; the controller
costs under 1% of the step time.
"""

from __future__ import annotations

import json
import os
import statistics
import time

from transformers import TrainerCallback

HERE = os.path.dirname(os.path.abspath(__file__))
OFFLINE = os.path.join(HERE, "..", "recipes", "configs", "gsm8k_gspo_offline.yaml")
BAND = (0.05, 0.2)


class ScaleLearningRateAt(TrainerCallback):
    """The drift: from `step` on, the scheduler's base learning rate is `factor` times the configured one."""

    def __init__(self, step: int, factor: float):
        self.step, self.factor = step, factor

    def on_step_begin(self, args, state, control, lr_scheduler=None, optimizer=None, **kwargs):
        if state.global_step == self.step:
            lr_scheduler.base_lrs = [self.factor * lr for lr in lr_scheduler.base_lrs]
            for group in optimizer.param_groups:
                group["lr"] *= self.factor


def per_side_recorder(trainer) -> dict:
    """Per optimizer step: [negatives, clipped low, positives, clipped high] over the off-policy responses."""
    from gspo_recipes import _trl

    counts: dict[int, list[int]] = {}
    record = trainer._record_responses

    def recording(log_s, lengths, response_adv, low, high, one_token=None):
        record(log_s, lengths, response_adv, low, high, one_token)
        if _trl.minibatch_index(trainer) == 1:
            return
        kept = lengths > 0
        negative, positive = (response_adv < 0) & kept, (response_adv > 0) & kept
        row = counts.setdefault(trainer.state.global_step, [0, 0, 0, 0])
        for index, value in enumerate((negative, low & negative, positive, high & positive)):
            row[index] += int(value.sum())

    trainer._record_responses = recording
    return counts


def controller_clock(trainer) -> dict:
    clock = {"s": 0.0}
    hook = trainer.adaptive_clip
    if hook is None:
        return clock
    for name in ("record", "at_micro_step"):
        original = getattr(hook, name)

        def timed(*args, _original=original, **kwargs):
            start = time.perf_counter()
            try:
                return _original(*args, **kwargs)
            finally:
                clock["s"] += time.perf_counter() - start

        setattr(hook, name, timed)
    return clock


def train_run(adaptive: bool, drift: bool, seed: int, steps: int, drift_step: int, out: str, factor: float) -> dict:
    from gspo_recipes import GSPOTrainer
    from gspo_recipes.recipe import (
        RecipeArguments,
        add_heldout_eval,
        as_prompt,
        load_train_dataset,
        model_and_tokenizer,
        parse_args,
        split_heldout,
    )
    from gspo_recipes.rewards import get_rewards

    argv = ["--output_dir", out, "--max_steps", str(steps), "--save_strategy", "no", "--seed", str(seed),
            "--heldout_eval_steps", str(steps)]  # fmt: skip
    script_args, args, model_args = parse_args(RecipeArguments, OFFLINE, argv)
    args.gspo_diagnostics = False  # the arms differ only in the range; the held-out callback is added below
    args.epsilon_adaptive = adaptive
    dataset = load_train_dataset(script_args, seed=args.seed)
    dataset, heldout = split_heldout(script_args, args, dataset, ("question", "answer"))
    dataset = dataset.map(lambda row: {"prompt": as_prompt(row["question"], None, True)})
    heldout = heldout.map(lambda row: {"prompt": as_prompt(row["question"], None, True)})
    model, tokenizer = model_and_tokenizer(model_args, args)
    trainer = GSPOTrainer(model=model, reward_funcs=get_rewards(["gsm8k_accuracy"]), args=args,
                          train_dataset=dataset, processing_class=tokenizer)  # fmt: skip
    add_heldout_eval(trainer, heldout, dataset)
    if drift:
        trainer.add_callback(ScaleLearningRateAt(drift_step, factor))
    counts = per_side_recorder(trainer)
    clock = controller_clock(trainer)
    start = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - start
    history = trainer.state.log_history
    rewards = [(e["step"], e["reward"]) for e in history if "reward" in e]
    pass1 = [e[k] for e in history for k in e if k.endswith("/pass@1")]
    epsilons = [(e["step"], e["gspo/epsilon_low"], e["gspo/epsilon_high"]) for e in history if "gspo/epsilon_low" in e]
    return {"adaptive": adaptive, "drift": drift, "drift_factor": factor if drift else None, "seed": seed,
            "counts": counts, "rewards": rewards,
            "pass1": pass1[-1] if pass1 else None, "wall_s": wall, "controller_s": clock["s"], "epsilons": epsilons,
            "heldout_prompts": min(len(heldout), args.heldout_max_prompts)}  # fmt: skip


def drift_factor(run: dict) -> float:
    """The learning-rate step of a drifted run (runs measured before the factor was kept had the doubling)."""
    return run.get("drift_factor") or 2.0


def side_shares(counts: dict, first: int, last: int) -> tuple[float, float]:
    """Each side's share clipped over the steps first..last (NaN for a side without responses there)."""
    rows = [row for step, row in counts.items() if first <= int(step) <= last]
    total = [sum(column) for column in zip(*rows)] if rows else [0, 0, 0, 0]
    return (total[1] / total[0] if total[0] else float("nan")), (total[3] / total[2] if total[2] else float("nan"))


def summarise(runs: list[dict], steps: int, drift_step: int) -> tuple[list[str], list[str]]:
    lines, failures = [], []
    lines.append(f"{'arm':<22} {'seed':>4} {'share low/high after drift':>27} {'reward last 50':>14} "
                 f"{'pass@1':>6} {'controller/step time':>21}")  # fmt: skip
    groups: dict[tuple, list[dict]] = {}
    for run in runs:
        groups.setdefault((run["drift"], run["adaptive"]), []).append(run)
        low, high = side_shares(run["counts"], drift_step, steps)
        last = [r for s, r in run["rewards"] if s > steps - 50]
        run["after"], run["last_reward"] = (low, high), statistics.fmean(last) if last else float("nan")
        name = (f"drift x{drift_factor(run):g} " if run["drift"] else "no drift ") + (
            "adaptive" if run["adaptive"] else "fixed"
        )
        cost = run["controller_s"] / run["wall_s"]
        lines.append(f"{name:<22} {run['seed']:>4} {low:>18.1%} / {high:>5.1%} {run['last_reward']:>14.3f} "
                     f"{run['pass1'] if run['pass1'] is not None else float('nan'):>6.3f} {cost:>21.3%}")  # fmt: skip
    for drift in (True, False):
        fixed, adaptive = groups.get((drift, False), []), groups.get((drift, True), [])
        if not fixed or not adaptive:
            continue
        mean_side = lambda rs, i: statistics.fmean(r["after"][i] for r in rs)  # noqa: E731
        if drift:
            a, f = (mean_side(adaptive, 0), mean_side(adaptive, 1)), (mean_side(fixed, 0), mean_side(fixed, 1))
            lines.append(f"after the drift (steps {drift_step}-{steps}), mean over seeds: adaptive {a[0]:.1%} / "
                         f"{a[1]:.1%}, fixed {f[0]:.1%} / {f[1]:.1%}")  # fmt: skip
            if not all(BAND[0] <= s <= BAND[1] for s in a):
                failures.append(f"adaptive per-side share after the drift {a} leaves [5%, 20%]")
            if all(BAND[0] <= s <= BAND[1] for s in f):
                failures.append(f"the fixed range stays in [5%, 20%] after the drift {f}: escalate the drift")
        else:
            rf, ra = [r["last_reward"] for r in fixed], [r["last_reward"] for r in adaptive]
            spread = max(statistics.pstdev(rf), statistics.pstdev(ra)) if len(rf) > 1 else float("nan")
            pf = [r["pass1"] for r in fixed if r["pass1"] is not None]
            pa = [r["pass1"] for r in adaptive if r["pass1"] is not None]
            prompts = fixed[0]["heldout_prompts"]
            lines.append(f"no drift: last-50 reward adaptive {statistics.fmean(ra):.3f} vs fixed "
                         f"{statistics.fmean(rf):.3f} (seeds' sd {spread:.3f}); pass@1 adaptive "
                         f"{statistics.fmean(pa) if pa else float('nan'):.3f} vs fixed "
                         f"{statistics.fmean(pf) if pf else float('nan'):.3f} ({prompts} problems)")  # fmt: skip
            if statistics.fmean(rf) - statistics.fmean(ra) > (spread if spread == spread else 0.0):
                failures.append(
                    "without drift the adaptive arm's reward is below the fixed one's by more than the spread"
                )
            if pa and pf and (statistics.fmean(pf) - statistics.fmean(pa)) * prompts > 2:
                failures.append("without drift the adaptive arm's pass@1 is more than 2 problems below the fixed one's")
    costs = [r["controller_s"] / r["wall_s"] for r in runs if r["adaptive"]]
    if costs:
        lines.append(f"controller time / run time: median {statistics.median(costs):.3%}")
        if statistics.median(costs) >= 0.01:
            failures.append("the controller costs 1% of the step time or more")
    return lines, failures


def plot_part_b(runs: list[dict], drift_step: int, path: str, factor: float, rollout_steps: int = 4) -> None:
    """Per-side share clipped per rollout (mean over seeds), fixed against adaptive, with and without drift."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, axes = plt.subplots(2, 2, figsize=(11, 6), sharex=True, sharey=True)
    for row, drift in enumerate((True, False)):
        for column, (side, index) in enumerate((("low (A < 0)", 0), ("high (A > 0)", 1))):
            ax = axes[row, column]
            for adaptive, style in ((False, "k:"), (True, "b-")):
                chosen = [r for r in runs if r["drift"] == drift and r["adaptive"] == adaptive]
                if not chosen:
                    continue
                # One point per rollout (its num_minibatches optimizer steps): a single step holds one minibatch.
                last = max(int(s) for r in chosen for s in r["counts"])
                starts = list(range(0, last + 1, rollout_steps))
                mean = [
                    np.nanmean([side_shares(r["counts"], a, a + rollout_steps - 1)[index] for r in chosen])
                    for a in starts
                ]
                label = ("adaptive" if adaptive else "fixed") + f" ({len(chosen)} seeds)"
                ax.plot([a + rollout_steps / 2 for a in starts], mean, style, marker=".", lw=1, label=label)
            ax.axhspan(*BAND, color="g", alpha=0.1)
            if drift:
                ax.axvline(drift_step, color="r", lw=0.8, ls="--")
            drifted = f"LR x{factor:g} at step {drift_step}"
            ax.set_title(f"{drifted if drift else 'no drift'}: clipped {side}", fontsize=9)
    axes[0, 0].legend(fontsize=8)
    for ax in axes[1]:
        ax.set_xlabel("optimizer step")
    for ax in axes[:, 0]:
        ax.set_ylabel("share of the side's off-policy responses")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def part_b(args) -> int:
    os.makedirs(args.out, exist_ok=True)
    results_path = os.path.join(args.out, "part_b.json")
    runs = json.load(open(results_path)) if os.path.exists(results_path) else []
    # A drifted run measured with another factor is not this run's (the steady ones are, whatever the factor).
    runs = [r for r in runs if not r["drift"] or drift_factor(r) == args.drift_factor]
    done = {(r["drift"], r["adaptive"], r["seed"]) for r in runs}
    for seed in range(args.seeds):
        for drift in (True, False):
            for adaptive in (False, True):
                if (drift, adaptive, seed) in done:  # resumable: a run already measured is kept
                    continue
                folder = os.path.join(
                    args.out, f"{'drift' if drift else 'steady'}_{'adaptive' if adaptive else 'fixed'}_{seed}"
                )
                run = train_run(adaptive, drift, seed, args.steps, args.drift_step, folder, args.drift_factor)
                runs.append(run)
                with open(results_path, "w") as f:
                    json.dump(runs, f)
                print(f"done: drift={drift} adaptive={adaptive} seed={seed} ({run['wall_s']:.0f} s)", flush=True)
    lines, failures = summarise(runs, args.steps, args.drift_step)
    print("\n".join(lines))
    if args.plot:
        plot_part_b(runs, args.drift_step, args.plot, factor=args.drift_factor)
        print(f"figure: {args.plot}")
    for failure in failures:
        print(f"FAIL {failure}")
    print("Part B: every check holds" if not failures else f"Part B: {len(failures)} check(s) failed")
    return 0 if not failures else 1
