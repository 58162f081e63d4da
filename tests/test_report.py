"""`gspo report`: figures and summary from a tiny real run, the one-sided warning from a crafted diagnostics file,
the missing-file and missing-matplotlib paths, and the pure helpers."""

import importlib.util
import json
import struct

import numpy as np
import pytest
from support import digit_count_reward, tiny_config

import gspo_recipes.commands.report as rep

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_size(path):
    """(width, height) from a PNG's IHDR chunk, after checking the signature."""
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """Eight GSPOTrainer steps on the tiny model (two generation batches of four minibatches), with the state saved."""
    from datasets import Dataset

    from gspo_recipes import GSPOTrainer
    from gspo_recipes.builtin.tiny import build_tiny_model_and_tokenizer

    out = tmp_path_factory.mktemp("run")
    model, tokenizer = build_tiny_model_and_tokenizer()
    dataset = Dataset.from_list([{"prompt": f"{a}+{b}="} for a in range(4) for b in range(4)])
    cfg = tiny_config(out, max_steps=8, max_completion_length=16, dynamic_sampling_reward="digit_count_reward")
    trainer = GSPOTrainer(
        model=model, reward_funcs=digit_count_reward, args=cfg, train_dataset=dataset, processing_class=tokenizer
    )
    trainer.train()
    trainer.save_state()
    return out


def test_report_of_a_tiny_run(tiny_run, capsys):
    pytest.importorskip("matplotlib")
    assert rep.report(str(tiny_run)) == 0
    for name in rep.FIGURES.values():
        width, height = png_size(tiny_run / name)
        assert width >= 500 and height >= 400 and (tiny_run / name).stat().st_size > 10_000, name
    summary = (tiny_run / rep.SUMMARY_FILE).read_text()
    assert capsys.readouterr().out.startswith(summary)
    assert "steps 1-8 (8 logged windows), 64 responses" in summary
    assert "clip range [1 - 0.0003, 1 + 0.0004]" in summary
    for k in (1, 2, 3, 4):  # minibatch 1 is on-policy: never clipped
        assert f"  {k}: " in summary
    assert "  1: 0.0% (low 0.0%, high 0.0%) of 16 responses" in summary
    assert "over 48 off-policy responses" in summary and "/ sqrt(L)" in summary
    assert str(tiny_run / rep.FIGURES["reward"]) in summary and "skipped" not in summary


@pytest.mark.skipif(
    importlib.util.find_spec("gspo_recipes.commands.calibrate") is None,
    reason="gspo_recipes.commands.cli also imports the calibrate subcommand, not written yet",
)
def test_console_script_dispatches_to_report(tiny_run):
    from gspo_recipes.commands.cli import main

    assert main(["report", str(tiny_run), "--bins", "20"]) in (0, 1)  # 1: figures skipped without matplotlib
    assert (tiny_run / rep.SUMMARY_FILE).exists()


# ----------------------------------------------------------------------------------------- crafted diagnostics


def crafted_line(step, log_s, signs, lengths, eps_low=3e-4, eps_high=4e-4, minibatch=2):
    """A diagnostics line as LogRatioHistogramCallback writes it, for off-policy responses of one minibatch."""
    log_s, signs, lengths = np.array(log_s), np.array(signs), np.array(lengths)
    low = (np.exp(log_s) < 1 - eps_low) & (signs < 0)
    high = (np.exp(log_s) > 1 + eps_high) & (signs > 0)
    counts, edges = np.histogram(log_s, bins=5, range=(log_s.min() - 1e-6, log_s.max() + 1e-6))
    buckets = []
    for lo, hi in ((1, 8), (9, 16)):
        inside = (lengths >= lo) & (lengths <= hi)
        buckets.append(
            {
                "lo": lo,
                "hi": hi,
                "responses": int(inside.sum()),
                "clipped_low": int(low[inside].sum()),
                "clipped_high": int(high[inside].sum()),
                "log_s_std": float(log_s[inside].std()) if inside.any() else None,
            }
        )
    return {
        "step": step,
        "epsilon_low": eps_low,
        "epsilon_high": eps_high,
        "responses": len(log_s),
        "bin_edges": edges.tolist(),
        "counts": counts.tolist(),
        "buckets": buckets,
        "minibatches": {
            str(minibatch): {"responses": len(log_s), "clipped_low": int(low.sum()), "clipped_high": int(high.sum())}
        },
        "off_policy": {"log_s": log_s.tolist(), "advantage_sign": signs.tolist(), "length": lengths.tolist()},
    }


def write_lines(run_dir, lines):
    run_dir.mkdir(exist_ok=True)
    with open(run_dir / rep.DIAGNOSTICS_FILE, "w") as f:
        f.writelines(json.dumps(line) + "\n" for line in lines)
    return run_dir


def test_one_sided_bias_is_warned_in_the_summary(tmp_path, capsys):
    # Every log s_i shifted down by 1e-3: all negative-advantage responses clipped low, no positive one clipped high.
    # 64 responses per side per step: enough for the warnings to judge the shares at once (min_responses=64).
    signs, lengths = [1, -1] * 64, [4, 6, 10, 12, 14, 16, 5, 11] * 16
    lines = [crafted_line(step, -1e-3 + 1e-6 * np.arange(128), signs, lengths) for step in (1, 2, 3)]
    run_dir = write_lines(tmp_path / "biased", lines)
    code = rep.report(str(run_dir))
    summary = (run_dir / rep.SUMMARY_FILE).read_text()
    assert "step 1 [one_sided]" in summary and "one side is clipped wholesale" in summary
    assert summary.count("[one_sided]") == 1  # warned once per occurrence, as the callback does
    assert "clip fraction: low 50.0%, high 0.0%" in summary
    assert f"no {rep.STATE_FILE} in {run_dir}" in summary  # the reward figure is skipped, and why
    if code == 0:  # with matplotlib: the three figures the diagnostics file allows
        assert all((run_dir / rep.FIGURES[key]).exists() for key in ("clip", "heatmap", "spread"))
        assert not (run_dir / rep.FIGURES["reward"]).exists()


def test_calm_run_has_no_warnings(tmp_path):
    lines = [crafted_line(step, [1e-5, -1e-5, 2e-5, -2e-5], [1, -1, 1, -1], [4, 4, 12, 12]) for step in (1, 2)]
    run_dir = write_lines(tmp_path / "calm", lines)
    rep.report(str(run_dir))
    summary = (run_dir / rep.SUMMARY_FILE).read_text()
    assert "replayed clip health warnings: none" in summary and "warnings the run gave: none recorded" in summary


def test_missing_diagnostics_file(tmp_path, capsys):
    assert rep.report(str(tmp_path)) == 2
    err = capsys.readouterr().err
    assert str(tmp_path / rep.DIAGNOSTICS_FILE) in err
    assert "GSPOTrainer writes" in err and "ClipFractionByLengthCallback" in err


def test_without_matplotlib_says_how_to_install(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(__import__("sys").modules, "matplotlib", None)  # makes `import matplotlib` fail
    run_dir = write_lines(tmp_path / "run", [crafted_line(1, [1e-4, -2e-4], [1, -1], [5, 12])])
    assert rep.report(str(run_dir)) == 1
    assert "pip install 'gspo-recipes[report]'" in capsys.readouterr().err
    assert "pip install 'gspo-recipes[report]'" in (run_dir / rep.SUMMARY_FILE).read_text()
    assert not list(run_dir.glob("*.png"))


# ----------------------------------------------------------------------------------------- helpers


def test_heat_map_rebinning_keeps_every_response():
    lines = [crafted_line(1, [0.0, 0.01], [1, -1], [4, 4]), crafted_line(2, [-0.02, 0.0, 0.03], [1, 1, -1], [4, 4, 4])]
    lines.insert(1, {**lines[0], "step": 5, "counts": [], "bin_edges": []})  # an on-policy window
    steps, grid, shares = rep.common_grid_histogram(lines, bins=10)
    assert steps == [1, 5, 2] and grid[0] <= -0.02 and grid[-1] >= 0.03
    assert shares[:, 0].sum() == pytest.approx(1.0) and shares[:, 2].sum() == pytest.approx(1.0)
    assert np.isnan(shares[:, 1]).all()


def test_spread_is_pooled_within_steps_and_fits_inverse_sqrt():
    # The same spread at every step, around means that drift: pooling within steps ignores the drift.
    lines = [
        crafted_line(step, [mean - 0.01, mean + 0.01, mean - 0.005, mean + 0.005], [1, -1, 1, -1], [4, 4, 16, 16])
        for step, mean in ((1, 0.0), (2, 0.5))
    ]
    (short, long) = rep.spread_by_length(lines)
    assert (short["lo"], short["hi"], short["mean_length"], short["values"]) == (1, 8, 4.0, 4)
    assert short["std"] == pytest.approx(0.01 * np.sqrt(2))  # deviations +-0.01, (2 + 2 values) - 2 groups
    assert long["std"] == pytest.approx(0.005 * np.sqrt(2))
    c = rep.fit_inverse_sqrt(
        [{"mean_length": 4.0, "std": 0.05, "values": 1}, {"mean_length": 16.0, "std": 0.025, "values": 3}]
    )
    assert c == pytest.approx(0.1)


def test_trainer_state_from_run_dir_else_newest_checkpoint(tmp_path):
    assert rep.find_trainer_state(str(tmp_path)) is None
    for n in (9, 10):
        (tmp_path / f"checkpoint-{n}").mkdir()
        (tmp_path / f"checkpoint-{n}" / rep.STATE_FILE).write_text("{}")
    assert rep.find_trainer_state(str(tmp_path)) == str(tmp_path / "checkpoint-10" / rep.STATE_FILE)
    (tmp_path / rep.STATE_FILE).write_text("{}")
    assert rep.find_trainer_state(str(tmp_path)) == str(tmp_path / rep.STATE_FILE)


def test_groups_figure_and_summary_match_the_logged_metrics(tiny_run):
    pytest.importorskip("matplotlib")
    from gspo_recipes.commands.report.groups import GROUPS_FIGURE, groups_series

    assert rep.report(str(tiny_run)) == 0
    width, _ = png_size(tiny_run / GROUPS_FIGURE)
    assert width >= 500
    lines = rep.read_diagnostics(str(tiny_run / rep.DIAGNOSTICS_FILE))
    series = groups_series(lines)
    history = rep.read_log_history(str(tiny_run / rep.STATE_FILE))
    logged = {e["step"]: e["gspo/groups/effective_frac"] for e in history if "gspo/groups/effective_frac" in e}
    assert series["step"] == sorted(logged) == [1, 5]  # one generation batch every four steps
    assert series["effective_frac"] == pytest.approx([logged[s] for s in series["step"]])
    summary = (tiny_run / rep.SUMMARY_FILE).read_text()
    assert "groups (judged on digit_count_reward, 16 groups in 2 generation batches)" in summary


def test_groups_judged_on_the_total_reward_say_so_and_claim_no_solved_share():
    from gspo_recipes.commands.report.groups import groups_summary

    counts = dict(batches=1, groups=4, responses=16, solve_all=1, solve_none=1, zero_std=2, effective=8)
    on_total = groups_summary([{"step": 1, "groups": {**counts, "reward": "total"}}])[0]
    assert on_total.startswith("groups (judged on total, 4 groups") and "solved" not in on_total
    older = groups_summary([{"step": 1, "groups": counts}])[0]  # a file from before sections named their reward
    assert older.startswith("groups (signal reward, 4 groups") and "all solved 25.0%" in older


def test_the_groups_figure_names_its_reward_and_draws_no_solved_share_on_a_total(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    from gspo_recipes.commands.report import groups

    drawn = []
    monkeypatch.setattr(groups, "save", lambda fig, pyplot, path: (drawn.append(fig), plt.close(fig)))
    counts = dict(batches=1, groups=4, responses=16, solve_all=1, solve_none=1, zero_std=2, effective=8)
    for reward, solved_drawn in (("gsm8k_accuracy", True), ("total", False)):
        assert groups.plot_groups([{"step": 1, "groups": {**counts, "reward": reward}}], str(tmp_path / "g.png"))
        axes = drawn[-1].axes[0]
        assert axes.get_title() == f"groups that carry signal (judged on {reward})"  # it said "(signal reward)"
        labels = [line.get_label() for line in axes.get_lines()]
        assert "effective_frac" in labels and ("solve_all_frac" in labels) == solved_drawn


# ------------------------------------------------------------------------------------------------ one-token clips


def with_one_token(line, one_token):
    """The line as written since one-token clips are recorded: per-response flags, per-bucket counts."""
    lengths = np.array(line["off_policy"]["length"])
    flags = np.array(one_token)
    line["off_policy"]["one_token"] = flags.tolist()
    for bucket in line["buckets"]:
        bucket["one_token"] = int((flags[(lengths >= bucket["lo"]) & (lengths <= bucket["hi"])] > 0).sum())
    return line


def test_one_token_share_is_drawn_listed_and_warned(tmp_path):
    # Every positive response clipped high (log s = 1e-3); those of length 1-8 are one-token clips: 3 of 4.
    signs, lengths = [1, -1] * 64, [4, 9, 5, 9, 12, 9, 6, 9] * 16
    lines = []
    for step in (1, 2):
        line = crafted_line(step, [1e-3] * 128, signs, lengths)
        lines.append(with_one_token(line, [int(s > 0 and n <= 8) for s, n in zip(signs, lengths)]))
    run_dir = write_lines(tmp_path / "one_token", lines)
    code = rep.report(str(run_dir))
    summary = (run_dir / rep.SUMMARY_FILE).read_text()
    assert "one-token clips: 75.0% of 128 clipped off-policy responses are clipped by a single outlier" in summary
    assert "by any single token, harmless when it moved little: 75.0% of 128 clipped responses" in summary
    assert "1-8 100% of 96" in summary and "9-16 0% of 32" in summary
    assert "[one_token_clips]: GSPO health: 75% of the clipped off-policy responses" in summary
    if code == 0:
        assert (run_dir / "gspo_one_token_clips.png").exists() and "gspo_one_token_clips.png" in summary


def test_one_token_clips_by_ordinary_drift_are_not_sent_to_token_log_ratio_clip(tmp_path):
    """The embedded default's clips: nearly all one-token clips, by tokens that moved a median 0.11 (115 of 117).
    The in-run warning stays silent on them; the report's line applies the same rule and does not ask for the clamp."""
    signs, lengths = [1, -1] * 64, [4, 9, 5, 9, 12, 9, 6, 9] * 16
    line = crafted_line(1, [1e-3] * 128, signs, lengths)
    drivers = [0.11 if s > 0 else 0.0 for s in signs]  # every clipped response: a one-token clip by a small move
    run_dir = write_lines(tmp_path / "drift", [with_one_token(line, drivers)])
    rep.report(str(run_dir))
    summary = (run_dir / rep.SUMMARY_FILE).read_text()
    listed = next(text for text in summary.splitlines() if text.startswith("one-token clips:"))
    assert listed.startswith("one-token clips: 0.0% of 64 clipped off-policy responses are clipped by a single outlier")
    assert "by any single token, harmless when it moved little: 100.0% of 64" in listed
    assert "[one_token_clips]" not in summary


def test_old_diagnostics_file_without_one_token_counts_still_reports(tmp_path):
    lines = [crafted_line(step, [1e-3] * 8, [1, -1] * 4, [4, 12] * 4) for step in (1, 2)]
    assert "one_token" not in lines[0]["off_policy"] and "one_token" not in lines[0]["buckets"][0]
    run_dir = write_lines(tmp_path / "old", lines)
    assert rep.report(str(run_dir)) in (0, 1)
    summary = (run_dir / rep.SUMMARY_FILE).read_text()
    assert "one-token clips: not recorded" in summary
    assert not (run_dir / "gspo_one_token_clips.png").exists()


# ----------------------------------------------------------------------------------------- replay hygiene


def wasting_lines(eps_highs=(4e-4, 4e-4, 4e-4), responses=128, **fields):
    """Lines whose positive responses are all clipped high (log s_i = 2.5 epsilon_high): the rollouts are wasted."""
    # Both lengths on both sides, so length says nothing about the advantage (no short_responses_clipped).
    signs, lengths = [1, -1] * (responses // 2), [4, 4, 12, 12] * (responses // 4)
    return [
        {**crafted_line(step, [2.5 * eps] * responses, signs, lengths, eps_high=eps), **fields}
        for step, eps in enumerate(eps_highs, start=1)
    ]


def replayed_kinds(lines):
    return [w["kind"] for w in rep.health_warnings(lines)]


@pytest.mark.parametrize("flag", ["calibrating", "clip_range_changed"])
def test_replay_judges_no_window_recorded_while_calibrating_nor_one_whose_range_changed(flag):
    assert "wasted_rollouts" in replayed_kinds(wasting_lines(**{flag: False}))
    assert replayed_kinds(wasting_lines(**{flag: True})) == []
    # Such a window also restarts the pooling: 32 positives before it and 32 after it are not judged together.
    lines = wasting_lines(responses=64)
    lines[1][flag] = True
    assert replayed_kinds(lines) == []
    assert "wasted_rollouts" in replayed_kinds(wasting_lines(responses=64))  # 96 positives pooled over 3 windows


def test_replay_pools_no_responses_across_a_change_of_range_between_windows():
    assert replayed_kinds(wasting_lines((4e-4, 4e-4), responses=64)) == ["wasted_rollouts", "one_sided"]
    assert replayed_kinds(wasting_lines((4e-4, 2e-3), responses=64)) == []  # 32 positives under each range


@pytest.mark.parametrize("applied", ["token", None])
def test_replay_gives_no_sequence_clip_warning_where_the_loss_applied_another_clip(applied):
    """A token-level (applied "token") or SAPO/VESPO/CISPO (None) run: the sequence clip was never applied."""
    assert replayed_kinds(wasting_lines(applied_clip="sequence")) == ["wasted_rollouts", "one_sided"]
    assert replayed_kinds(wasting_lines(applied_clip=applied)) == []
    on_policy = wasting_lines(applied_clip=applied)
    for line in on_policy:
        line["minibatches"] = {"1": line["minibatches"]["2"]}
    assert replayed_kinds(on_policy) == []
    assert replayed_kinds([{**line, "applied_clip": "sequence"} for line in on_policy])[0] == "on_policy"


def test_the_replayed_wasted_rollouts_quotes_the_range_the_line_records():
    replayed = rep.health_warnings(wasting_lines((2e-3, 2e-3)))
    (message,) = [w["message"] for w in replayed if w["kind"] == "wasted_rollouts"]
    assert "widen epsilon_high (now 0.002)" in message


@pytest.mark.parametrize("names, drawn", [(["gsm8k_accuracy"], (0.0, 1.0)), (["digit_count_reward"], None)])
def test_the_reward_figure_never_draws_a_reward_no_response_can_get(tmp_path, monkeypatch, names, drawn):
    """A 0/1 reward at mean 0.5 has std 0.5: the band mean ± std fits [0, 1]; at 0.1 (std 0.3) it would reach -0.2.
    The band is clipped to the reward's range; a reward whose range is unknown gets its std as a line instead."""
    pytest.importorskip("matplotlib")
    from gspo_recipes.commands.report import figures

    shown = {}
    monkeypatch.setattr(figures, "save", lambda fig, plt, path: shown.update(axes=fig.axes[0]))
    history = [{"step": s, "reward": p, "reward_std": (p * (1 - p)) ** 0.5, **{f"rewards/{n}/mean": p for n in names}}
               for s, p in enumerate([0.1, 0.5, 0.95], start=1)]  # fmt: skip
    assert figures.plot_reward(history, str(tmp_path / "reward.png"))
    bands = shown["axes"].collections
    if drawn is None:
        assert not bands and "std over the batch" in shown["axes"].get_legend_handles_labels()[1][1]
        return
    heights = np.concatenate([band.get_paths()[0].vertices[:, 1] for band in bands])
    assert heights.min() >= drawn[0] and heights.max() <= drawn[1]
    assert heights.min() == 0.0  # at 0.1 the band is clipped at 0, where mean - std is -0.2


def test_gspo_help_names_every_subcommand(capsys):
    from gspo_recipes.commands.cli import main

    with pytest.raises(SystemExit):
        main(["--help"])
    description = capsys.readouterr().out.split("\n\n")[1]  # the line under the usage, before the subcommand list
    for name in ("report", "calibrate", "simulate", "passrate", "audit-reward"):
        assert name in description, name


# ------------------------------------------------------------------------------- figures that tell the truth


def drawn_axes(monkeypatch, module):
    """Capture the axes a plot function draws instead of writing the file."""
    from gspo_recipes.commands.report import figures

    pytest.importorskip("matplotlib")
    shown = {}
    monkeypatch.setattr(module, "save", lambda fig, plt, path: shown.update(axes=fig.axes))
    if module is not figures:
        monkeypatch.setattr(figures, "save", lambda fig, plt, path: shown.update(axes=fig.axes))
    return shown


def test_the_one_token_figure_puts_the_threshold_on_the_quantity_it_belongs_to(tmp_path, monkeypatch):
    """Above: the share of clipped responses that an outlier token clips (the warning's quantity), with 0.5. Below:
    the share by any token, with no threshold. With ordinary drift only, the first is 0 while the second is 1."""
    from gspo_recipes.commands.report import one_token

    shown = drawn_axes(monkeypatch, one_token)
    signs, lengths = [1, -1] * 64, [4, 9, 5, 9, 12, 9, 6, 9] * 16
    line = with_one_token(crafted_line(1, [1e-3] * 128, signs, lengths), [0.1 * (s > 0) for s in signs])
    assert one_token.plot_one_token([line], str(tmp_path / "f.png"))
    judged, anyone = shown["axes"]
    assert "outlier token" in judged.get_title() and "warning's quantity" in judged.get_title()
    share = [artist for artist in judged.lines if artist.get_label().startswith("share")][0]
    assert list(share.get_ydata()) == [0.0]
    assert [artist.get_ydata()[0] for artist in judged.lines if "warning above" in artist.get_label()] == [0.5]
    assert "gspo/clip_frac/one_token" in anyone.get_title() and "no threshold" in anyone.get_title()
    assert all("warning" not in artist.get_label() for artist in anyone.lines)
    assert [artist.get_ydata()[0] for artist in anyone.lines if artist.get_label() == "all lengths"] == [1.0]


@pytest.mark.parametrize("long_std, drawn", [(0.025, True), (0.045, False)])
def test_the_spread_line_is_drawn_only_where_it_fits(long_std, drawn, tmp_path, monkeypatch):
    """Two buckets on c / sqrt(L) (std halves from L = 4 to 16): the line, with its error. One far off it: no line,
    and the legend and the summary say by how much it misses."""
    from gspo_recipes.commands.report import figures

    points = [{"mean_length": 4.0, "std": 0.05, "values": 100}, {"mean_length": 16.0, "std": long_std, "values": 100}]
    c, error, law = rep.spread_law(points)
    shown = drawn_axes(monkeypatch, figures)
    figures.plot_spread([{**p, "lo": 1, "hi": 8} for p in points], str(tmp_path / "f.png"), c, error, law)
    labels = shown["axes"][0].get_legend_handles_labels()[1]
    if drawn:
        assert error == pytest.approx(0.0, abs=1e-9) and "fitted std = 0.1 / sqrt(L), rms error 0%" in law
        assert any("sqrt(L) (fitted, rms error 0%)" in label for label in labels)
    else:
        assert error > 0.2 and "does not follow c / sqrt(L)" in law and "none is drawn" in law
        assert not any("(fitted" in label for label in labels)
        assert any("does not follow" in label for label in labels)
        assert "L^-0.08" in law  # 0.05 -> 0.045 over a factor 4 in length: log(0.9) / log(4)


def test_held_out_series_have_their_own_colours_a_legend_and_step_0(tmp_path, monkeypatch):
    from gspo_recipes.commands.report import heldout

    shown = drawn_axes(monkeypatch, heldout)
    scores = {"pass@1": 0.2, "pass@4": 0.5, "greedy": 0.3, "maj@4": 0.25}
    start = {"step": 0, "prompts": 8, "num_samples": 4, "rewards": {"gsm8k_accuracy": scores}, "mean_length": 9.0}
    start["seconds"] = 1.0
    later = {**start, "step": 10, "train_reward": 0.4}
    lines = [{"step": 1, "heldout_start": start}, {"step": 10, "heldout": later}]
    assert heldout.plot_heldout(lines, [], str(tmp_path / "f.png"))
    (ax,) = shown["axes"]
    series = [artist for artist in ax.lines if artist.get_label().startswith("held-out")]
    assert len(series) == 4 and len({artist.get_color() for artist in series}) == 4
    assert all(list(artist.get_xdata()) == [0, 10] for artist in series)
    assert ax.get_xlim()[0] < 0 and ax.get_legend() is not None
    assert "steps 0-10, 2 evaluations" in heldout.heldout_summary(lines)[0]


def test_a_report_removes_the_figures_of_an_earlier_one(tmp_path):
    """A figure the run no longer draws (a held-out figure from an earlier run in the folder) is not left beside the
    new ones."""
    run_dir = write_lines(tmp_path / "run", [crafted_line(1, [1e-3, -1e-3] * 8, [1, -1] * 8, [4, 9] * 8)])
    (run_dir / "gspo_heldout.png").write_bytes(b"an earlier run's figure")
    rep.report(str(run_dir))
    assert not (run_dir / "gspo_heldout.png").exists()
