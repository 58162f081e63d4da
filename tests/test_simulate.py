"""`gspo simulate`: the 1/sqrt(L) law, the token-range fraction and the CLI, on reduced counts so it stays fast."""

import argparse
import importlib.util
import math

import pytest

from gspo_recipes import simulate as sim


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
    reason="gspo_recipes.cli imports the report and calibrate subcommands, not written yet",
)
def test_console_script_dispatches_to_simulate(capsys):
    from gspo_recipes.cli import main

    assert main(["simulate", "--count", "300", "--lengths", "32"]) == 0
    assert "sigma/sqrt(L)" in capsys.readouterr().out


# ------------------------------------------------------------------ outlier tokens and token_log_ratio_clip


def test_outlier_tokens_make_one_token_clips_and_the_clamp_removes_them():
    from gspo_recipes.simulate_outliers import simulate_outliers

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
    from gspo_recipes.cli import main

    argv = ["simulate", "--sigma", "0.002", "--count", "400", "--lengths", "64", "--outlier-shift", "4.6"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "one-token (clamp)" in out and "no --token-log-ratio-clip" in out
    assert main(argv + ["--token-log-ratio-clip", "0.005"]) == 0
    row = capsys.readouterr().out.strip().splitlines()[-1].split()
    assert row[0] == "64" and all(cell.endswith("%") for cell in row[1:3])  # with the clamp's columns filled
    assert row[3].endswith("%")
