"""The explainer's toy run: GRPO against GSPO when the behaviour log-probabilities are noisy.

64 prompts, each with a random target string of L tokens over a 6-token vocabulary. The policy is an independent
softmax per (prompt, position): its parameters are logits of shape (64, L, 6), initialised to zero, with nothing
shared, so token-level credit assignment is exactly right and GRPO is not handicapped by the model. The reward is
the fraction of positions that match the target.

Each step samples 16 prompts x G = 8 responses, standardises rewards within each group, and takes four SGD steps
on random quarters of the 128 responses, so three of the four are off-policy. Gaussian noise of standard deviation
sigma is added to every behaviour log-probability before the ratios, to mimic routing changes or a mismatch
between inference and training engines. Both losses come from `gspo_recipes.loss`: GSPO is `gspo_loss`, GRPO is
`grpo_token_loss`, the token-level clipped surrogate reduced the same way.

    python benchmarks/toy_noisy_logprobs.py            # the full grid: 2 methods x 2 lengths x 3 noise levels x 5 seeds
    python benchmarks/toy_noisy_logprobs.py --quick    # a smaller grid, seconds

The number reported is the final expected per-token accuracy (the mean probability of the target token over all
64 prompts and L positions, which equals the expected reward); chance is 1/6.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

try:
    from gspo_recipes.loss import grpo_token_loss as grpo_loss
    from gspo_recipes.loss import gspo_loss
except ImportError:  # run from a checkout without installing the package
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from gspo_recipes.loss import grpo_token_loss as grpo_loss
    from gspo_recipes.loss import gspo_loss

# GRPO's clip in the GSPO paper's baseline. GSPO's is the paper's (3e-4, 4e-4) scaled to this toy, whose per-token
# drift between minibatches is far larger than in the paper's setting (the explainer's choice).
CLIP = {"grpo": (0.2, 0.27), "gspo": (0.0225, 0.03)}
METHODS = ("grpo", "gspo")


@dataclass
class ToyConfig:
    method: str = "gspo"
    length: int = 32
    sigma: float = 0.0
    seed: int = 0
    steps: int = 100
    clip: tuple[float, float] | None = None  # None: CLIP[method]
    lr: float = 1000.0
    prompts: int = 64
    vocab: int = 6
    prompts_per_step: int = 16
    group_size: int = 8
    minibatches: int = 4


@dataclass
class ToyResult:
    config: ToyConfig
    accuracy: float  # final expected per-token accuracy
    accuracy_curve: list[float] = field(default_factory=list)  # after each step
    # One row per (step, minibatch): the fraction of tokens clipped (for GSPO, the tokens of clipped responses)
    # and the largest |log-ratio| the loss saw (|log s_i| for GSPO, |log w_it| for GRPO).
    clip_frac: list[list[float]] = field(default_factory=list)
    max_abs_log_ratio: list[list[float]] = field(default_factory=list)

    def mean_clip_frac(self, minibatches: slice = slice(None)) -> float:
        values = [v for row in self.clip_frac for v in row[minibatches]]
        return sum(values) / max(len(values), 1)


def expected_accuracy(logits: torch.Tensor, targets: torch.Tensor) -> float:
    """Mean probability of the target token over every prompt and position (= expected reward of a sample)."""
    probs = torch.softmax(logits, -1).gather(-1, targets.unsqueeze(-1))
    return probs.mean().item()


def run_toy(config: ToyConfig) -> ToyResult:
    """One training run of one method; deterministic given the config."""
    if config.method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}")
    loss_fn = gspo_loss if config.method == "gspo" else grpo_loss
    eps_low, eps_high = config.clip or CLIP[config.method]
    gen = torch.Generator().manual_seed(config.seed)
    num_prompts, length, vocab, group = config.prompts, config.length, config.vocab, config.group_size
    targets = torch.randint(vocab, (num_prompts, length), generator=gen)
    logits = torch.zeros(num_prompts, length, vocab, requires_grad=True)
    batch = config.prompts_per_step * group
    mask = torch.ones(batch // config.minibatches, length)
    result = ToyResult(config, accuracy=expected_accuracy(logits.detach(), targets))

    for _ in range(config.steps):
        with torch.no_grad():  # rollout: sample, score, standardise within each group
            logp_table = torch.log_softmax(logits, -1)
            prompt_of = torch.randperm(num_prompts, generator=gen)[: config.prompts_per_step].repeat_interleave(group)
            probs = logp_table[prompt_of].exp().reshape(-1, vocab)
            tokens = torch.multinomial(probs, 1, generator=gen).view(batch, length)
            rewards = (tokens == targets[prompt_of]).float().mean(-1).view(-1, group)
            advantages = ((rewards - rewards.mean(1, keepdim=True)) / (rewards.std(1, keepdim=True) + 1e-6)).view(-1)
            logp_old = logp_table[prompt_of].gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
            if config.sigma > 0:
                logp_old = logp_old + config.sigma * torch.randn(logp_old.shape, generator=gen)
            # Random quarters, not whole groups: with no shared parameters, a minibatch of unseen prompts would be
            # exactly on-policy and the later minibatches would not be off-policy at all.
            order = torch.randperm(batch, generator=gen)

        clip_row, ratio_row = [], []
        for idx in order.chunk(config.minibatches):
            # The same log_softmax over the whole table as in the rollout, so that the first minibatch reproduces
            # logp_old bit for bit and its ratios are exactly 1 when sigma = 0.
            logp = torch.log_softmax(logits, -1)[prompt_of[idx]].gather(-1, tokens[idx].unsqueeze(-1)).squeeze(-1)
            loss, stats = loss_fn(logp, logp_old[idx], advantages[idx], mask, eps_low, eps_high)
            (grad,) = torch.autograd.grad(loss, logits)
            with torch.no_grad():
                logits -= config.lr * grad  # plain SGD, as in the explainer
            clip_row.append(stats["clip_frac"])
            ratio_row.append(stats["log_s" if config.method == "gspo" else "log_ratio"].abs().max().item())
        result.clip_frac.append(clip_row)
        result.max_abs_log_ratio.append(ratio_row)
        result.accuracy_curve.append(expected_accuracy(logits.detach(), targets))

    result.accuracy = result.accuracy_curve[-1] if result.accuracy_curve else result.accuracy
    return result


def run_grid(
    lengths, sigmas, seeds: int, steps: int, clips: dict | None = None, lr: float = 1000.0, log=print
) -> dict[tuple[str, int, float], list[ToyResult]]:
    """Every method x length x sigma, `seeds` runs each (seeds 0..seeds-1, shared by both methods)."""
    clips = clips or CLIP
    results = {}
    for length in lengths:
        for sigma in sigmas:
            for method in METHODS:
                runs = [
                    run_toy(ToyConfig(method, length, sigma, seed, steps, clips[method], lr)) for seed in range(seeds)
                ]
                results[(method, length, sigma)] = runs
                if log:
                    acc = sum(r.accuracy for r in runs) / len(runs)
                    log(f"  done {method} L={length} sigma={sigma:g}: accuracy {acc:.3f}", file=sys.stderr)
    return results


def _mean_std(values: list[float]) -> tuple[float, float]:
    t = torch.tensor(values, dtype=torch.float64)
    return t.mean().item(), (t.std().item() if len(values) > 1 else 0.0)


def format_tables(results, lengths, sigmas) -> str:
    lines = [
        f"{'method':<6} {'L':>4} {'sigma':>6} {'accuracy':>9} {'(sd)':>7} {'clip mb1':>9} {'clip mb2-4':>11}",
    ]
    for length in lengths:
        for sigma in sigmas:
            for method in METHODS:
                runs = results[(method, length, sigma)]
                acc, sd = _mean_std([r.accuracy for r in runs])
                first = sum(r.mean_clip_frac(slice(0, 1)) for r in runs) / len(runs)
                later = sum(r.mean_clip_frac(slice(1, None)) for r in runs) / len(runs)
                lines.append(f"{method:<6} {length:>4} {sigma:>6g} {acc:>9.3f} {sd:>7.3f} {first:>9.2%} {later:>11.2%}")
    lines += ["", "GSPO minus GRPO (paired by seed), and each method's loss of accuracy to the noise:"]
    lines.append(f"{'L':>4} {'sigma':>6} {'gap':>7} {'(sd)':>7} {'GRPO drop':>10} {'GSPO drop':>10}")
    for length in lengths:
        for sigma in sigmas:
            gaps = [
                s.accuracy - g.accuracy
                for g, s in zip(results[("grpo", length, sigma)], results[("gspo", length, sigma)])
            ]
            gap, sd = _mean_std(gaps)
            drops = []
            for method in METHODS:
                clean = _mean_std([r.accuracy for r in results[(method, length, sigmas[0])]])[0]
                drops.append(clean - _mean_std([r.accuracy for r in results[(method, length, sigma)]])[0])
            lines.append(f"{length:>4} {sigma:>6g} {gap:>+7.3f} {sd:>7.3f} {drops[0]:>+10.3f} {drops[1]:>+10.3f}")
    lines.append(
        "accuracy: final expected per-token accuracy, mean over seeds (chance 0.167); clip: fraction of tokens "
        "clipped (GSPO: tokens of clipped responses), on the on-policy first minibatch and the three later ones; "
        f"drops are against sigma = {sigmas[0]:g}."
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--seeds", type=int, default=5, help="runs per cell, seeds 0..N-1")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--lengths", type=int, nargs="+", default=[32, 128])
    # The explainer does not say which noise level its toy used; 0.1 is the simulate section's, 0.2 shows more.
    parser.add_argument(
        "--sigma", type=float, nargs="+", default=[0.0, 0.1, 0.2], help="noise levels; the first is the baseline"
    )
    parser.add_argument("--lr", type=float, default=1000.0)
    parser.add_argument("--grpo-clip", type=float, nargs=2, default=list(CLIP["grpo"]), metavar=("LOW", "HIGH"))
    parser.add_argument("--gspo-clip", type=float, nargs=2, default=list(CLIP["gspo"]), metavar=("LOW", "HIGH"))
    parser.add_argument("--threads", type=int, default=1, help="torch threads; the tensors are tiny, so 1 is fastest")
    parser.add_argument("--quick", action="store_true", help="2 seeds, 30 steps, L = 32 only")
    args = parser.parse_args(argv)
    if args.quick:
        args.seeds, args.steps, args.lengths = 2, 30, [32]
    torch.set_num_threads(args.threads)

    clips = {"grpo": tuple(args.grpo_clip), "gspo": tuple(args.gspo_clip)}
    print(
        f"toy: 64 prompts, vocabulary 6, 16 prompts x 8 responses per step, 4 minibatches, lr {args.lr:g}, "
        f"{args.steps} steps, {args.seeds} seeds; clip GRPO {clips['grpo']}, GSPO {clips['gspo']}"
    )
    start = time.perf_counter()
    results = run_grid(args.lengths, args.sigma, args.seeds, args.steps, clips, args.lr)
    print(format_tables(results, args.lengths, args.sigma))
    print(f"wall time {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
