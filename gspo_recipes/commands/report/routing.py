"""The routing part of `gspo report`: MoE routing volatility from the "routing" sections of `gspo_diagnostics.jsonl`
(written by `RoutingVolatilityCallback`). Pure functions over the parsed lines, plus one figure.

The figure has two panels: the share of (completion token, MoE layer) expert sets that changed since the responses
were sampled, per minibatch over steps (minibatch 1 is on-policy: 0), and a heat map of the share per MoE layer
over steps.
"""

from __future__ import annotations

import numpy as np

from gspo_recipes.commands.report.figures import pyplot, save

ROUTING_FIGURE = "gspo_routing.png"


def routing_lines(lines: list[dict]) -> list[dict]:
    """The lines that carry a routing section (MoE runs)."""
    return [line for line in lines if isinstance(line.get("routing"), dict)]


def routing_series(lines: list[dict]) -> dict[int, tuple[list[int], list[float]]]:
    """Per minibatch k: (steps, changed share) over the logged windows that trained on minibatch k."""
    series: dict[int, tuple[list[int], list[float]]] = {}
    for line in routing_lines(lines):
        for k, entry in line["routing"].get("minibatches", {}).items():
            steps, shares = series.setdefault(int(k), ([], []))
            steps.append(line["step"])
            shares.append(entry["changed_frac"])
    return dict(sorted(series.items()))


def routing_summary(lines: list[dict]) -> list[str]:
    """Lines for gspo_report.txt: the changed share per minibatch and per layer, weighted by expert sets."""
    lines = routing_lines(lines)
    if not lines:
        return []
    per_k: dict[int, list[float]] = {}
    for line in lines:
        for k, entry in line["routing"].get("minibatches", {}).items():
            totals = per_k.setdefault(int(k), [0.0, 0.0])
            totals[0] += entry["changed_frac"] * entry["sets"]
            totals[1] += entry["sets"]
    out = ["MoE routing: share of (completion token, layer) expert sets changed since sampling, by minibatch:"]
    out += [f"  {k}: {changed / max(sets, 1):.2%} of {int(sets)} sets" for k, (changed, sets) in sorted(per_k.items())]
    layers = np.array([line["routing"]["per_layer"] for line in lines if line["routing"].get("per_layer")])
    if layers.size:
        mean = layers.mean(axis=0)
        out.append("  per MoE layer (mean over windows): " + ", ".join(f"{v:.1%}" for v in mean))
    return out


def plot_routing(lines: list[dict], path: str) -> bool:
    """Write the routing figure; False (nothing written) when the run logged no routing sections."""
    lines = routing_lines(lines)
    if not lines:
        return False
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    for k, (steps, shares) in routing_series(lines).items():
        left.plot(steps, 100 * np.asarray(shares), "o-", ms=3, label=f"minibatch {k}" + (" (on-policy)" * (k == 1)))
    left.set(xlabel="step", ylabel="% of expert sets changed", title="routing change since sampling, per minibatch")
    left.legend(fontsize=8)
    with_layers = [line for line in lines if line["routing"].get("per_layer")]
    if with_layers:
        grid = 100 * np.array([line["routing"]["per_layer"] for line in with_layers]).T  # (layers, windows)
        steps = [line["step"] for line in with_layers]
        mesh = right.imshow(
            grid,
            aspect="auto",
            origin="lower",
            cmap="viridis",
            interpolation="nearest",
            extent=(steps[0] - 0.5, steps[-1] + 0.5, -0.5, grid.shape[0] - 0.5),
        )
        fig.colorbar(mesh, ax=right, label="% of the layer's expert sets changed")
        right.set_yticks(range(grid.shape[0]))
    right.set(xlabel="step", ylabel="MoE layer", title="routing change per layer (all minibatches of the window)")
    save(fig, plt, path)
    return True
