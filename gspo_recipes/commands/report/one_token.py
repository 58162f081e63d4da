"""The one-token part of `gspo report`: the share of clipped responses that a single token clips
(`gspo/clip_frac/one_token`, `gspo_recipes.loss.one_token_clips`), over steps and per length bucket, from the
`one_token` counts of the diagnostics file's `buckets` entries. Files written before those counts existed report
without it. Pure functions over the parsed lines, plus one figure.
"""

from __future__ import annotations

from gspo_recipes.commands.report.figures import pyplot, save

# gspo_recipes.stats.health (torch) is imported where its rule is used: `gspo report --help` imports this module.

ONE_TOKEN_FIGURE = "gspo_one_token_clips.png"


def has_one_token_counts(line: dict) -> bool:
    return any("one_token" in bucket for bucket in line.get("buckets", []))


def one_token_series(lines: list[dict]) -> dict[str, dict[str, list]]:
    """Per bucket label ("all" for every length): the steps with clipped responses and their one-token share."""
    series: dict[str, dict[str, list]] = {}

    def add(label, step, clipped, one_token):
        if clipped:
            entry = series.setdefault(label, {"steps": [], "share": []})
            entry["steps"].append(step)
            entry["share"].append(one_token / clipped)

    for line in lines:
        if not has_one_token_counts(line):
            continue
        buckets = line["buckets"]
        clipped = [b["clipped_low"] + b["clipped_high"] for b in buckets]
        add("all", line["step"], sum(clipped), sum(b["one_token"] for b in buckets))
        for bucket, n in zip(buckets, clipped):
            add(f"{bucket['lo']}-{bucket['hi']}", line["step"], n, bucket["one_token"])
    return series


def outlier_clips(lines: list[dict]) -> tuple[int, int]:
    """(one-token clips by an outlier token, clipped off-policy responses), pooled over the lines: the in-run
    warning's own rule (`stats.health.ONE_TOKEN_OUTLIER_LOG_RATIO`), since a peaked model's ordinary drift makes most
    of its clips one-token clips by small moves, which a clamp would only distort."""
    from gspo_recipes.stats.health import ONE_TOKEN_OUTLIER_LOG_RATIO

    outliers = clipped = 0
    for line in lines:
        drivers = line.get("off_policy", {}).get("one_token")
        if drivers is None:
            continue
        outliers += sum(value >= ONE_TOKEN_OUTLIER_LOG_RATIO for value in drivers)
        clipped += sum(m["clipped_low"] + m["clipped_high"] for k, m in line.get("minibatches", {}).items() if k != "1")
    return outliers, clipped


def one_token_summary(lines: list[dict]) -> list[str]:
    """The line for gspo_report.txt: the share of the clipped off-policy responses that an outlier token clips (what
    the in-run warning judges), then every one-token clip, overall and per length bucket."""
    from gspo_recipes.stats.health import ONE_TOKEN_OUTLIER_LOG_RATIO

    recorded = [line for line in lines if has_one_token_counts(line)]
    if not recorded:
        return ["one-token clips: not recorded (a diagnostics file from before gspo/clip_frac/one_token)"]
    totals: dict[str, list[int]] = {}
    for line in recorded:
        for b in line["buckets"]:
            entry = totals.setdefault(f"{b['lo']}-{b['hi']}", [0, 0])
            entry[0] += b["clipped_low"] + b["clipped_high"]
            entry[1] += b["one_token"]
    clipped = sum(t[0] for t in totals.values())
    if not clipped:
        return ["one-token clips: no clipped responses"]
    one_token = sum(t[1] for t in totals.values())
    per_length = ", ".join(f"{label} {t[1] / t[0]:.0%} of {t[0]}" for label, t in totals.items() if t[0])
    outliers, off_policy = outlier_clips(recorded)
    judged = (
        f"{outliers / off_policy:.1%} of {off_policy} clipped off-policy responses are clipped by a single outlier "
        f"token (|log-ratio| >= {ONE_TOKEN_OUTLIER_LOG_RATIO:g}, the in-run warning's rule; above half, see "
        "token_log_ratio_clip)"
        if off_policy
        else "no clipped off-policy responses"
    )
    return [
        f"one-token clips: {judged}; by any single token, harmless when it moved little: {one_token / clipped:.1%} "
        f"of {clipped} clipped responses (by length: {per_length})"
    ]


def outlier_share_series(lines: list[dict]) -> dict[str, list]:
    """Per line with clipped off-policy responses: its step and the share of them that an outlier token clips, the
    quantity the in-run one-token warning judges (pooled over windows there, until enough responses)."""
    series: dict[str, list] = {"steps": [], "share": []}
    for line in lines:
        if line.get("off_policy", {}).get("one_token") is None:
            continue
        outliers, clipped = outlier_clips([line])
        if clipped:
            series["steps"].append(line["step"])
            series["share"].append(outliers / clipped)
    return series


def plot_one_token(lines: list[dict], path: str) -> bool:
    """Two panels: above, the share the warning judges (one-token clips by an outlier token) with its threshold;
    below, the share by any single token (gspo/clip_frac/one_token), per length, which has no threshold. False (no
    figure) when no line has the counts."""
    from gspo_recipes.stats.health import ONE_TOKEN_OUTLIER_LOG_RATIO

    series = one_token_series(lines)
    if not series:
        return False
    plt = pyplot()
    fig, (judged, anyone) = plt.subplots(2, 1, figsize=(7, 6.5), sharex=True)
    outliers = outlier_share_series(lines)
    if outliers["steps"]:
        judged.plot(outliers["steps"], outliers["share"], "o-", color="C3", ms=3, label="share (per logged window)")
    else:
        judged.text(0.5, 0.5, "no clipped off-policy responses", ha="center", transform=judged.transAxes)
    judged.axhline(0.5, color="grey", lw=0.8, ls=":", label="warning above 0.5 (windows pooled)")
    judged.set(ylabel="share of clipped responses", ylim=(-0.02, 1.02),
               title=f"clipped by one outlier token (|log-ratio| >= {ONE_TOKEN_OUTLIER_LOG_RATIO:g}): the warning's "
               "quantity")  # fmt: skip
    judged.legend(fontsize=8)
    for label, entry in series.items():
        if label == "all":
            anyone.plot(entry["steps"], entry["share"], "k--", lw=1.5, label="all lengths")
        else:
            anyone.plot(entry["steps"], entry["share"], "o-", ms=3, label=f"length {label}")
    anyone.set(xlabel="step", ylabel="share of clipped responses", ylim=(-0.02, 1.02),
               title="clipped by any single token (gspo/clip_frac/one_token): no threshold, harmless when it moved "
               "little")  # fmt: skip
    anyone.title.set_fontsize(9)
    judged.title.set_fontsize(9)
    anyone.legend(fontsize=8)
    save(fig, plt, path)
    return True
