"""The held-out part of `gspo report`: the held-out scores beside the training reward, from the "heldout" sections of
`gspo_diagnostics.jsonl` (written by HeldoutEvalCallback, callbacks/heldout_eval.py) and the run's log history.
Pure functions over the parsed lines, plus one figure.
"""

from __future__ import annotations

from gspo_recipes.commands.report.figures import pyplot, save

HELDOUT_FIGURE = "gspo_heldout.png"


def heldout_sections(lines: list[dict]) -> list[dict]:
    """The held-out sections in step order (each carries its own evaluation step), the evaluation before training
    (`heldout_start`, step 0) first when the run made one."""
    return [line[key] for line in lines for key in ("heldout_start", "heldout") if isinstance(line.get(key), dict)]


def heldout_summary(lines: list[dict]) -> list[str]:
    """One line per held-out grader for gspo_report.txt: each score at the first and the last evaluation, and the
    training reward over the same steps."""
    sections = heldout_sections(lines)
    if not sections:
        return []
    first, last = sections[0], sections[-1]
    span = f"steps {first['step']}-{last['step']}, {len(sections)} evaluations"
    out = []
    for name in last["rewards"]:
        scores = ", ".join(
            f"{metric} {first['rewards'].get(name, {}).get(metric, float('nan')):.3f} -> {value:.3f}"
            for metric, value in last["rewards"][name].items()
        )
        # The evaluation before training has no training reward yet: the first one that has.
        train = [next((s["train_reward"] for s in sections if s.get("train_reward") is not None), None)]
        train.append(last.get("train_reward"))
        trained = f"; training reward {train[0]:.3f} -> {train[1]:.3f}" if None not in train else ""
        out.append(
            f"held-out {name} ({last['prompts']} prompts, k={last['num_samples']}, {span}): {scores}{trained}; "
            f"mean length {last['mean_length']:.1f} tokens, {sum(s['seconds'] for s in sections):.1f} s generating"
        )
    return out


def plot_heldout(lines: list[dict], log_history: list[dict], path: str) -> bool:
    """Held-out pass@1 / pass@k / maj@k / greedy per grader, and the training reward, over steps; False (no figure)
    when the run has no held-out section."""
    sections = heldout_sections(lines)
    if not sections:
        return False
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    rewards = [(entry["step"], entry["reward"]) for entry in log_history if entry.get("reward") is not None]
    if rewards:
        ax.plot(*zip(*rewards), color="0.6", lw=0.8, label="training reward")
    else:  # no trainer_state.json: the training reward the callback recorded at each evaluation
        points = [(s["step"], s["train_reward"]) for s in sections if s.get("train_reward") is not None]
        if points:
            ax.plot(*zip(*points), color="0.6", marker="s", ms=3, label="training reward (per evaluation)")
    steps = [s["step"] for s in sections]
    styles = {"pass@1": "-", "greedy": "--", "maj": "-.", "pass@k": ":"}
    series = [(name, metric) for name in sections[-1]["rewards"] for metric in sections[-1]["rewards"][name]]
    for number, (name, metric) in enumerate(series):  # a colour of its own per series, the style says the metric
        values = [s["rewards"].get(name, {}).get(metric) for s in sections]
        style = styles.get(metric, styles["maj"] if metric.startswith("maj") else styles["pass@k"])
        ax.plot(steps, values, color=f"C{number % 10}", ls=style, marker="o", ms=3, label=f"held-out {name} {metric}")
    ax.set(xlabel="step", ylabel="score", ylim=(-0.02, 1.02), title="held-out scores beside the training reward")
    ax.set_xlim(left=-0.02 * max(1, steps[-1]))  # step 0, the evaluation before training, on the axis
    ax.legend(fontsize=7)
    save(fig, plt, path)
    return True
