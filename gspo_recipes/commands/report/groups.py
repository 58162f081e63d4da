"""The groups part of `gspo report`: which groups carried signal, from the "groups" sections of
`gspo_diagnostics.jsonl` (written by GSPOTrainer's group health, gspo_recipes/trainer/group_health.py), and with dynamic
sampling its "dynamic_sampling" sections. Pure functions over the parsed lines, plus one figure.
"""

from __future__ import annotations

from gspo_recipes.commands.report.figures import pyplot, save

# gspo_recipes.stats.groups (torch) is imported in the functions that use it: `gspo report --help` imports this module.

GROUPS_FIGURE = "gspo_groups.png"
SERIES = ("solve_all_frac", "solve_none_frac", "zero_std_frac", "effective_frac")


def groups_series(lines: list[dict]) -> dict[str, list[float]]:
    """Per logged line with a groups section: its step and the gspo/groups/* fractions (short names)."""
    from gspo_recipes.stats.groups import group_fractions

    out: dict[str, list[float]] = {"step": [], **{name: [] for name in SERIES}}
    for line in lines:
        counts = line.get("groups")
        if not isinstance(counts, dict) or not counts.get("groups"):
            continue
        out["step"].append(line["step"])
        for name, value in group_fractions(counts).items():
            out[name.rsplit("/", 1)[-1]].append(value)
    return out


def groups_summary(lines: list[dict]) -> list[str]:
    """Lines for gspo_report.txt: the pooled group fractions and, with dynamic sampling, what it generated."""
    from gspo_recipes.stats.groups import LowSignalWarning, group_fractions

    total: dict[str, int] = {}
    sampled: dict[str, int] = {}
    for line in lines:
        for section, into in (("groups", total), ("dynamic_sampling", sampled)):
            for key, value in (line.get(section) or {}).items():
                if not isinstance(value, str):
                    into[key] = into.get(key, 0) + value
    if not total.get("groups"):
        return []
    f = group_fractions(total)
    judged_on = _judged_on(lines)
    reward = _reward_words(judged_on)
    solved = (
        ""
        if judged_on == ["total"]  # solved means 1 on a 0/1 success reward, which a total is not
        else f", all solved {f['gspo/groups/solve_all_frac']:.1%}, none solved {f['gspo/groups/solve_none_frac']:.1%}"
    )
    out = [
        f"groups ({reward}, {total['groups']} groups in {total.get('batches', 0)} generation batches): "
        f"effective {f['gspo/groups/effective_frac']:.1%} of responses, zero-std {f['gspo/groups/zero_std_frac']:.1%}"
        + solved
    ]
    replay = LowSignalWarning(window=3, dynamic_sampling=bool(sampled.get("batches")))
    replay.emit = False  # the report prints what it finds itself
    for line in lines:  # each logged line pools the generation batches since the previous one
        if (line.get("groups") or {}).get("responses") and replay.update(line["groups"]):
            message = replay.history[-1]["message"]
            out.append(f"  warning at step {line['step']} (judged over 3 logged lines): {message}")
    if sampled.get("batches"):
        out.append(
            f"  dynamic sampling: {sampled['rounds'] / sampled['batches']:.2f} rounds per batch, "
            f"{sampled['generated_groups']} groups generated for {sampled['groups']} slots, "
            f"{sampled['kept_groups']} kept"
        )
    return out


def _judged_on(lines: list[dict]) -> list[str]:
    """The rewards the groups sections were judged on, in order of first use (none in files from before the sections
    named their reward)."""
    named: list[str] = []
    for line in lines:
        for section in ("groups", "dynamic_sampling"):
            for value in (line.get(section) or {}).values():
                if isinstance(value, str) and value not in named:
                    named.append(value)
    return named


def _reward_words(judged_on: list[str]) -> str:
    return f"judged on {', '.join(judged_on)}" if judged_on else "signal reward"


def plot_groups(lines: list[dict], path: str) -> bool:
    """The four fractions over steps, with the low-signal warning's threshold, which is effective_frac's; False (no
    figure) when no line has a groups section."""
    from gspo_recipes.stats.groups import LowSignalWarning

    series = groups_series(lines)
    if not series["step"]:
        return False
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    styles = {"effective_frac": "k-", "zero_std_frac": "r--", "solve_all_frac": "g:", "solve_none_frac": "b:"}
    judged_on = _judged_on(lines)
    for name in SERIES:
        if judged_on == ["total"] and name.startswith("solve_"):
            continue  # as in the summary: solved means 1 on a 0/1 success reward, which a total is not
        ax.plot(series["step"], series[name], styles[name], marker="o", ms=3, label=name)
    threshold = LowSignalWarning().threshold
    ax.axhline(threshold, color="k", lw=0.8, ls=":", label=f"effective_frac warning below {threshold:g} (pooled)")
    ax.set(xlabel="step", ylabel="share", ylim=(-0.02, 1.02),
           title=f"groups that carry signal ({_reward_words(judged_on)})")  # fmt: skip
    ax.legend(fontsize=8)
    save(fig, plt, path)
    return True
