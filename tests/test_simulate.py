"""`gspo simulate`: the 1/sqrt(L) law, the token-range fraction and the CLI, on reduced counts so it stays fast."""

import argparse
import importlib.util
import math

import pytest

import gspo_recipes.commands.simulate as sim


def normal_cdf(x: float) -> float:
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def expected_token_fraction(sigma: float, eps_low: float, eps_high: float) -> float:
    """Fraction of N(0, sigma) log-ratios outside [log(1 - eps_low), log(1 + eps_high)]."""
    lo, hi = sim.log_bounds(eps_low, eps_high)
    return normal_cdf(lo / sigma) + 1.0 - normal_cdf(hi / sigma)


def test_sequence_spread_follows_inverse_sqrt_length():
    rows = sim.simulate(sigma=0.1, lengths=[16, 256, 1024], count=4000, seed=1)
    for row in rows:
        # The std of a std estimate from n draws is about 1/sqrt(2n) = 1.1% relative: 5% is over four of those.
        assert row.log_s_std == pytest.approx(0.1 / math.sqrt(row.length), rel=0.05)
        assert row.reference_std == pytest.approx(0.1 / math.sqrt(row.length))
        assert row.token_log_ratio_std == pytest.approx(0.1, rel=0.01)


def test_token_range_fraction_does_not_depend_on_length():
    rows = sim.simulate(sigma=0.1, lengths=[16, 256, 1024], count=4000, seed=2)
    expected = expected_token_fraction(0.1, *sim.DEFAULT_TOKEN_RANGE)
    assert expected == pytest.approx(0.021, abs=0.001)  # the explainer's 2.1%
    for row in rows:
        assert row.token_frac_outside == pytest.approx(expected, abs=0.003)


def test_paper_range_leaves_most_long_responses_outside():
    (row,) = sim.simulate(sigma=0.1, lengths=[4096], count=2000, seed=3)
    assert row.response_frac_outside > 0.75  # about 0.82 in expectation
    assert row.response_frac_outside == pytest.approx(row.response_frac_low + row.response_frac_high)


def test_chunking_does_not_change_the_draws(monkeypatch):
    whole = sim.simulate(sigma=0.1, lengths=[16], count=10, seed=4)
    monkeypatch.setattr(sim, "CHUNK_ELEMENTS", 64)  # 4 responses per chunk: 4 + 4 + 2
    chunked = sim.simulate(sigma=0.1, lengths=[16], count=10, seed=4)
    assert chunked[0].log_s_std == pytest.approx(whole[0].log_s_std, rel=1e-6)
    assert chunked[0].token_log_ratio_std == pytest.approx(whole[0].token_log_ratio_std, rel=1e-6)


def run_subcommand(argv):
    parser = argparse.ArgumentParser(prog="gspo")
    sim.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["simulate", *argv])
    return args.func(args)


def test_cli_prints_one_row_per_length(capsys):
    assert run_subcommand(["--count", "500", "--lengths", "16", "64", "--sigma", "0.05", "--seed", "7"]) == 0
    out = capsys.readouterr().out
    assert "sigma/sqrt(L)" in out
    rows = [line.split() for line in out.splitlines() if line.strip() and line.split()[0].isdigit()]
    assert [int(r[0]) for r in rows] == [16, 64]
    assert float(rows[0][3]) == pytest.approx(0.05 / 4)  # the reference column


def test_plot_writes_png(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    path = tmp_path / "spread.png"
    assert run_subcommand(["--count", "200", "--lengths", "16", "256", "--plot", str(path)]) == 0
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_without_matplotlib_says_how_to_install(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(__import__("sys").modules, "matplotlib", None)  # makes `import matplotlib` fail
    assert run_subcommand(["--count", "200", "--plot", str(tmp_path / "x.png")]) == 1
    assert "pip install 'gspo-recipes[report]'" in capsys.readouterr().err


@pytest.mark.skipif(
    any(importlib.util.find_spec(f"gspo_recipes.{name}") is None for name in ("report", "calibrate")),
    reason="gspo_recipes.commands.cli imports the report and calibrate subcommands, not written yet",
)
def test_console_script_dispatches_to_simulate(capsys):
    from gspo_recipes.commands.cli import main

    assert main(["simulate", "--count", "300", "--lengths", "32"]) == 0
    assert "sigma/sqrt(L)" in capsys.readouterr().out


# ------------------------------------------------------------------ outlier tokens and token_log_ratio_clip


def test_outlier_tokens_make_one_token_clips_and_the_clamp_removes_them():
    from gspo_recipes.commands.simulate_outliers import simulate_outliers

    common = dict(sigma=0.002, lengths=[64, 256], count=2000, sequence_range=(3e-4, 4e-4), seed=0)
    clean = simulate_outliers(outlier_shift=4.6, outlier_rate=0.0, **common)
    rows = simulate_outliers(outlier_shift=4.6, outlier_rate=0.01, token_clip=0.005, **common)
    for before, row in zip(clean, rows):
        # The outliers add clips, most of them by one token at 64 tokens; without outliers few are.
        assert row.clip_frac > before.clip_frac + 0.05 and row.one_token_frac > 2 * before.one_token_frac
        # The clamp cuts the clips the outliers drive: fewer responses clipped, far fewer by one token.
        assert row.clip_frac_clamped < row.clip_frac / 3
        assert row.one_token_frac_clamped < row.one_token_frac / 4
    assert rows[0].one_token_share > 0.5


def test_cli_prints_the_outlier_table_with_and_without_the_clamp(capsys):
    from gspo_recipes.commands.cli import main

    argv = ["simulate", "--sigma", "0.002", "--count", "400", "--lengths", "64", "--outlier-shift", "4.6"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "one-token (clamp)" in out and "no --token-log-ratio-clip" in out
    assert main(argv + ["--token-log-ratio-clip", "0.005"]) == 0
    row = capsys.readouterr().out.strip().splitlines()[-1].split()
    assert row[0] == "64" and all(cell.endswith("%") for cell in row[1:3])  # with the clamp's columns filled
    assert row[3].endswith("%")


def test_length_scaled_range_clips_the_same_share_at_every_length():
    """sigma = 0.01 with the paper's range: the plain range clips nearly every 16-token response and few 4096-token
    ones; scaled from L_ref = 4096 it clips at every length what the plain range clips at 4096."""
    lengths = [16, 256, 4096]
    rows = sim.simulate(sigma=0.01, lengths=lengths, count=4000, seed=5, reference_length=4096)
    expected = expected_token_fraction(0.01 / math.sqrt(4096), *sim.DEFAULT_SEQUENCE_RANGE)  # the share at L_ref
    assert rows[0].response_frac_outside > 0.8 and rows[-1].response_frac_outside < 0.1
    for row in rows:
        # 4,000 draws: the standard error of a share near 0.06 is 0.004; 0.015 is over three of those.
        assert row.scaled_frac_outside == pytest.approx(expected, abs=0.015)
        assert row.scaled_frac_outside == pytest.approx(row.scaled_frac_low + row.scaled_frac_high)
    assert rows[-1].scaled_frac_outside == rows[-1].response_frac_outside  # at L_ref the ranges are the same
    assert sim.simulate(sigma=0.01, lengths=[16], count=10)[0].scaled_frac_outside is None  # not asked: not shown


def test_cli_shows_the_scaled_range_beside_the_plain_one(capsys):
    assert run_subcommand(["--count", "500", "--lengths", "16", "64", "--sigma", "0.01"]) == 0
    out = capsys.readouterr().out
    assert "scaled out" in out and "x sqrt(64 / L)" in out
    rows = [line.split() for line in out.splitlines() if line.strip() and line.split()[0].isdigit()]
    assert all(len(r) == 11 for r in rows) and rows[-1][8] == rows[-1][5]  # at L_ref both ranges agree
    assert run_subcommand(["--count", "500", "--lengths", "16", "--reference-length", "0"]) == 0
    assert "scaled out" not in capsys.readouterr().out
