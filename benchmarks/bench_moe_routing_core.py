"""Routing volatility of one Adam step, and the per-step cost of recording and replaying routes, on a tiny MoE.

Model: a Qwen3-MoE of 4 layers, 8 experts, top-2, hidden 64, with the project's character tokenizer, pretrained
briefly (Adam, lr 3e-3) on generated grade-school word problems with worked answers. Printed:

1. For lr 1e-5 / 1e-4 / 3e-4 / 1e-3: one Adam step (fresh optimiser, so the step moves every parameter by about lr)
   on a language-modelling batch, then the share of (token, MoE layer) top-k expert sets and of expert slots that
   differ on a held-out batch, and how much more the log-probability of tokens whose routes changed (in any layer)
   moves than that of the others. Medians over trials (different training batches).
2. The time of a forward+backward of the training loss, plain and with `RouteRecorder` on (plus `routing_change`
   against stored routes, i.e. the whole volatility metric), and with `RoutingReplay`; arms interleaved in one run,
   one torch thread, medians.

    python benchmarks/bench_moe_routing_core.py           # about two minutes on one core
    python benchmarks/bench_moe_routing_core.py --quick   # shorter pretraining, fewer trials and repeats
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch

from gspo_recipes.builtin.data.synthetic_gsm import make_gsm_problems
from gspo_recipes.builtin.tiny import build_tokenizer
from gspo_recipes.moe import RouteRecorder, RoutingReplay, build_tiny_moe, routing_change


def encode(problems, tokenizer):
    texts = [f"{p['question']}\n{p['answer']}" for p in problems]
    batch = tokenizer(texts, add_special_tokens=False, padding=True, return_tensors="pt")
    labels = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
    return {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"], "labels": labels}


def pretrain(steps, seed=0):
    tokenizer = build_tokenizer()
    tokenizer.padding_side = "right"
    model = build_tiny_moe("qwen3_moe", seed=seed, num_layers=4, hidden_size=64, vocab_size=len(tokenizer))
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    problems = make_gsm_problems(32 * steps, seed=seed)
    for step in range(steps):
        loss = model(**encode(problems[32 * step : 32 * (step + 1)], tokenizer)).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if step % 50 == 0 or step == steps - 1:
            print(f"  pretrain step {step:4d}  loss {loss.item():.3f}", flush=True)
    return model.eval(), tokenizer


def routes_and_logps(model, batch):
    with torch.no_grad(), RouteRecorder(model) as recorder:
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    ids = batch["input_ids"][:, 1:]
    logps = torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, ids[..., None]).squeeze(-1)
    return recorder.routes(), logps


def one_step_change(model, tokenizer, lr, train_batch, eval_batch):
    model = copy.deepcopy(model)
    routes_before, logps_before = routes_and_logps(model, eval_batch)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    model.train()
    model(**train_batch).loss.backward()
    optimizer.step()
    model.eval()
    routes_after, logps_after = routes_and_logps(model, eval_batch)
    mask = eval_batch["attention_mask"]
    change = routing_change(routes_before, routes_after, mask)
    # Log-probability of token t+1 is computed at position t: compare its move with the routes at position t.
    flipped = (routes_before != routes_after).flatten(2).any(-1)[:, :-1] & (mask[:, 1:] == 1)
    kept = ~flipped & (mask[:, 1:] == 1)
    moved = (logps_after - logps_before).abs()
    ratio = moved[flipped].mean().item() / moved[kept].mean().item() if flipped.any() else float("nan")
    return change["changed_frac"], change["changed_slot_frac"], ratio


def volatility(model, tokenizer, trials):
    eval_batch = encode(make_gsm_problems(64, seed=999), tokenizer)
    print("\nOne Adam step: share of (token, MoE layer) top-k sets / expert slots that change (held-out batch)")
    print(f"{'lr':>8} {'changed_frac':>13} {'slot_frac':>10} {'|dlogp| flipped/kept':>21}")
    for lr in (1e-5, 1e-4, 3e-4, 1e-3):
        rows = [
            one_step_change(model, tokenizer, lr, encode(make_gsm_problems(32, seed=100 + t), tokenizer), eval_batch)
            for t in range(trials)
        ]
        sets, slots, ratios = (statistics.median(column) for column in zip(*rows))
        print(f"{lr:8.0e} {100 * sets:12.2f}% {100 * slots:9.2f}% {ratios:20.1f}x")


def timed(fn):
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def overhead(model, tokenizer, repeats):
    model = copy.deepcopy(model).train()
    batch = encode(make_gsm_problems(16, seed=7), tokenizer)
    stored, _ = routes_and_logps(model, batch)
    mask = batch["attention_mask"]

    def plain():
        model(**batch).loss.backward()

    def with_metric():
        with RouteRecorder(model) as recorder:
            model(**batch).loss.backward()
        routing_change(stored, recorder.routes(), mask)

    def with_replay():
        with RoutingReplay(model, stored):
            model(**batch).loss.backward()

    arms = {
        "plain forward+backward": plain,
        "+ RouteRecorder + routing_change": with_metric,
        "+ RoutingReplay": with_replay,
    }
    times = {name: [] for name in arms}
    for _ in range(3):  # warm-up
        for fn in arms.values():
            fn()
    for _ in range(repeats):
        for name, fn in arms.items():
            model.zero_grad()
            times[name].append(timed(fn))
    base = statistics.median(times["plain forward+backward"])
    print(f"\nPer-step time, {tuple(batch['input_ids'].shape)} tokens, {repeats} interleaved repeats, medians")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"  {name:34s} {1000 * median:8.2f} ms   {100 * (median / base - 1):+6.1f}%")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    steps, trials, repeats = (120, 3, 15) if args.quick else (400, 5, 40)
    print(f"Pretraining a tiny Qwen3-MoE for {steps} steps")
    model, tokenizer = pretrain(steps)
    volatility(model, tokenizer, trials)
    overhead(model, tokenizer, repeats)


if __name__ == "__main__":
    main()
