"""Overhead of the diagnostics callbacks: the same tiny GSPO run with `gspo_diagnostics=True` and `False`.

The target: with both callbacks on, a training step takes at most 2% longer than without, and the memory they hold
grows with the number of responses per logging window, never with sequence length times steps.

Setting (the callbacks' worst case: they do their work at every logging step, and a step of the tiny model is
short): the tiny offline model, 16 responses per optimizer step (2 prompts x 8 generations), completions of up to
64 tokens, 4 optimizer steps per generation batch, `logging_steps=1`, one torch thread. Each repeat trains both
arms from the same seed, in alternating order; both run exactly the same steps (the callbacks never change
training). The first generation batch of every run is warm-up. Printed:

- wall and CPU time per step over the next `--steps` optimizer steps (from `on_step_begin` of the first measured
  step to the end of training, so logging and the diagnostics file are included), per repeat and as medians;
- the same from the fastest repeat of each single step (load from other processes only ever adds time);
- the time spent inside the two callbacks' `on_step_end` and the extra time in `Trainer.log`, measured where it is
  spent: the overhead figure that noise does not blur. On a shared machine the end-to-end ratios can swing by more
  than the 2% being measured, in either direction, from one invocation to the next;
- the memory `ResponseStats` holds per logging window, per response, and that it does not depend on length.

`ResponseStats.record` runs inside GSPOTrainer's loss in both arms, so it is not part of the difference.

    python benchmarks/bench_callbacks_overhead.py            # 7 repeats of 48 steps per arm, about two minutes
    python benchmarks/bench_callbacks_overhead.py --quick    # 3 repeats of 16 steps, about half a minute

`--heldout` measures instead the held-out evaluation's share of the embedded default's wall time
(recipes/configs/gsm8k_gspo_offline.yaml: the cold-start model, 32 held-out prompts, 1 greedy + 4 sampled completions
each, every 50 steps): in one process it trains the default for some steps (the baseline: wall seconds per optimizer
step, after one generation batch of warm-up) and times `HeldoutEvalCallback.evaluate` on the same trained model,
alternating, then prints the medians and the share, evaluation / (50 steps + evaluation).

    python benchmarks/bench_callbacks_overhead.py --heldout --quick   # 2 repeats of 8 steps + 2 evaluations
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("WANDB_DISABLED", "true")

import torch  # noqa: E402
from transformers import PrinterCallback, TrainerCallback  # noqa: E402

try:
    from gspo_recipes.stats.response_stats import FIELDS, ResponseStats
except ImportError:  # run from a checkout without installing the package
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from gspo_recipes.stats.response_stats import FIELDS, ResponseStats

MINIBATCHES = 4  # optimizer steps per generation batch (GSPOConfig's default)


def digit_count_reward(completions, **kwargs):
    return [sum(ch.isdigit() for ch in c) / max(1, len(c)) for c in completions]


def now() -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process)."""
    return time.perf_counter(), time.process_time()


class StepClock(TrainerCallback):
    """Wall and CPU time at every on_step_begin."""

    def __init__(self):
        self.begins: list[tuple[float, float]] = []

    def on_step_begin(self, args, state, control, **kwargs):
        self.begins.append(now())


def timed(obj, method: str, spent: list[float]) -> None:
    """Wrap obj.method on the instance so that its own wall and CPU time are added to spent[0] and spent[1]."""
    inner = getattr(obj, method)

    def wrapper(*args, **kwargs):
        start = now()
        try:
            return inner(*args, **kwargs)
        finally:
            end = now()
            spent[0] += end[0] - start[0]
            spent[1] += end[1] - start[1]

    setattr(obj, method, wrapper)


def window_bytes(window: dict[str, torch.Tensor]) -> int:
    return sum(t.element_size() * t.numel() for t in window.values())


def chunk_bytes(stats: ResponseStats) -> tuple[int, int, int]:
    """(responses, tensor bytes, micro-batch chunks) held in a ResponseStats between windows."""
    responses = sum(c["log_s"].numel() for c in stats._chunks)
    return responses, sum(window_bytes(c) for c in stats._chunks), len(stats._chunks)


def train_once(diagnostics: bool, opts, measured_from: int) -> dict:
    """One run; returns seconds per measured optimizer step, callback seconds per step and memory figures."""
    from datasets import Dataset

    from gspo_recipes import GSPOConfig, GSPOTrainer
    from gspo_recipes.builtin.tiny import build_tiny_model_and_tokenizer
    from gspo_recipes.callbacks import ClipFractionByLengthCallback, LogRatioHistogramCallback

    model, tokenizer = build_tiny_model_and_tokenizer()
    dataset = Dataset.from_list([{"prompt": f"{a}+{b}="} for a in range(10) for b in range(10)])
    with tempfile.TemporaryDirectory() as out:
        cfg = GSPOConfig(
            output_dir=out,
            per_device_train_batch_size=opts.batch_size,
            num_generations=opts.num_generations,
            max_completion_length=opts.max_completion_length,
            num_minibatches=MINIBATCHES,
            max_steps=measured_from + opts.steps,
            learning_rate=1e-3,
            logging_steps=1,
            report_to="none",
            save_strategy="no",
            use_cpu=True,
            seed=0,
            temperature=1.0,
            gspo_diagnostics=diagnostics,
            disable_tqdm=True,
            log_level="error",
        )
        trainer = GSPOTrainer(
            model=model, reward_funcs=digit_count_reward, args=cfg, train_dataset=dataset, processing_class=tokenizer
        )
        trainer.remove_callback(PrinterCallback)  # disable_tqdm=True would print every log line
        clock, spent, spent_logging = StepClock(), [0.0, 0.0], [0.0, 0.0]
        trainer.add_callback(clock)
        spent_at_measure_start = []
        for cb in trainer.callback_handler.callbacks:
            if isinstance(cb, (ClipFractionByLengthCallback, LogRatioHistogramCallback)):
                timed(cb, "on_step_end", spent)
        timed(trainer, "log", spent_logging)  # the callbacks add ~40 metrics to every log call

        # Memory: what the ResponseStats holds just before each window is taken.
        stats = trainer.response_stats  # None without the callbacks: then nothing is recorded at all
        held = []
        if stats is not None:
            take_window = stats.window

            def window_and_measure(step, accelerator=None):
                if stats._window_step != step:
                    held.append(chunk_bytes(stats))
                return take_window(step, accelerator)

            stats.window = window_and_measure

        class MarkMeasureStart(TrainerCallback):
            def on_step_begin(self, args, state, control, **kwargs):
                if state.global_step == measured_from:
                    spent_at_measure_start.extend(spent + spent_logging)

        trainer.add_callback(MarkMeasureStart())
        trainer.train()
        # begins[i] is the start of step i + 1; the measurement runs from the start of step measured_from + 1 to
        # the end of training, so the last step's logging and diagnostics are included.
        end = now()
        start = clock.begins[measured_from]
        step = [(e - s) / opts.steps for s, e in zip(start, end)]  # (wall, CPU) seconds per step
        marks = clock.begins[measured_from:] + [end]
        per_step = [(b[0] - a[0], b[1] - a[1]) for a, b in zip(marks, marks[1:])]  # each measured step alone
        callbacks, logging_ = (
            [(s - s0) / opts.steps for s, s0 in zip(totals, spent_at_measure_start[i:])]
            for i, totals in ((0, spent), (2, spent_logging))
        )
        leftover = chunk_bytes(stats) if stats is not None else 0
    return {
        "step": step,
        "per_step": per_step,
        "callbacks": callbacks,
        "logging": logging_,
        "held": held,
        "leftover": leftover,
        "steps_total": measured_from + opts.steps,
    }


def synthetic_window_memory(lengths=(64, 1024, 16384), responses=512, micro_batch=16) -> list[tuple[int, int, int]]:
    """ResponseStats bytes per response for the same number of responses at very different lengths."""
    rows = []
    for length in lengths:
        stats = ResponseStats()
        for _ in range(responses // micro_batch):
            n = micro_batch
            no = torch.zeros(n, dtype=torch.bool)
            stats.record(torch.randn(n) * 1e-3, torch.full((n,), length), torch.randn(n), no, no, minibatch=2)
        window = stats.window(step=1)
        rows.append((length, window["log_s"].numel(), window_bytes(window)))
    return rows


def format_row(row: dict) -> str:
    (wall_off, wall_on), (cpu_off, cpu_on), (cb_wall, cb_cpu) = row["wall"], row["cpu"], row["callbacks_ms"]
    return (
        f"{wall_off:>10.4f} {wall_on:>10.4f} {wall_on / wall_off:>7.3f}   "
        f"{cpu_off:>10.4f} {cpu_on:>10.4f} {cpu_on / cpu_off:>7.3f} {cb_wall:>9.2f} {cb_cpu:>8.2f}"
    )


def heldout_share(opts) -> int:
    """The held-out evaluation's share of the embedded default's wall time (see the module docstring)."""
    from gspo_recipes import GSPOTrainer
    from gspo_recipes.recipe import (
        RecipeArguments,
        add_heldout_eval,
        as_prompt,
        load_train_dataset,
        model_and_tokenizer,
        parse_args,
        split_heldout,
    )  # fmt: skip
    from gspo_recipes.rewards import get_rewards

    config = Path(__file__).resolve().parents[1] / "recipes" / "configs" / "gsm8k_gspo_offline.yaml"
    steps = MINIBATCHES + opts.steps
    with tempfile.TemporaryDirectory() as out:
        argv = ["--output_dir", out, "--max_steps", str(steps), "--save_strategy", "no", "--disable_tqdm", "true"]
        script_args, training_args, model_args = parse_args(RecipeArguments, str(config), argv)
        training_args.log_level = "error"
        every = training_args.heldout_eval_steps
        training_args.heldout_eval_steps = 10**9  # evaluated below, by hand, not during the timed steps
        dataset = load_train_dataset(script_args, seed=training_args.seed)
        dataset, heldout = split_heldout(script_args, training_args, dataset, ("question", "answer"))
        model, tokenizer = model_and_tokenizer(model_args, training_args)
        dataset = dataset.map(lambda row: {"prompt": as_prompt(row["question"], None, True)})
        heldout = heldout.map(lambda row: {"prompt": as_prompt(row["question"], None, True)})
        step_seconds, eval_seconds = [], []
        for repeat in range(opts.repeats):
            trainer = GSPOTrainer(model=model, reward_funcs=get_rewards(["gsm8k_accuracy"]), args=training_args,
                                  train_dataset=dataset, processing_class=tokenizer)  # fmt: skip
            trainer.remove_callback(PrinterCallback)
            add_heldout_eval(trainer, heldout, dataset)
            callback, clock = trainer.callback_handler.callbacks[-1], StepClock()
            trainer.add_callback(clock)
            trainer.train()
            end = time.perf_counter()
            step_seconds.append((end - clock.begins[MINIBATCHES][0]) / opts.steps)
            start = time.perf_counter()
            callback.evaluate(step=steps)
            eval_seconds.append(time.perf_counter() - start)
            print(f"repeat {repeat + 1}: {step_seconds[-1]:.3f} s per step, {eval_seconds[-1]:.2f} s per evaluation",
                  flush=True)  # fmt: skip
        rows, k = len(callback.rows), callback.num_samples
    step, evaluation = statistics.median(step_seconds), statistics.median(eval_seconds)
    share = evaluation / (every * step + evaluation)
    print(
        f"\nmedians: {step:.3f} s per optimizer step (baseline, no evaluation), {evaluation:.2f} s per held-out "
        f"evaluation ({rows} prompts x (1 greedy + {k} sampled), max_completion_length "
        f"{training_args.max_completion_length})\n=> one evaluation every {every} steps: {share:.1%} of the wall "
        f"time (an evaluation costs {evaluation / step:.1f} optimizer steps)"
    )
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=48, help="measured optimizer steps per run (after warm-up)")
    parser.add_argument("--repeats", type=int, default=7, help="runs per arm, interleaved")
    parser.add_argument("--batch-size", type=int, default=16, help="per_device_train_batch_size (responses per step)")
    parser.add_argument("--num-generations", type=int, default=8)
    parser.add_argument("--max-completion-length", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: steadier on a shared machine)")
    parser.add_argument("--quick", action="store_true", help="3 repeats of 16 steps (with --heldout: 2 of 8)")
    parser.add_argument("--heldout", action="store_true", help="the held-out evaluation's share of the wall time")
    opts = parser.parse_args(argv)
    if opts.quick:
        opts.steps, opts.repeats = (8, 2) if opts.heldout else (16, 3)
    if opts.heldout:
        torch.set_num_threads(opts.threads)
        warnings.filterwarnings("ignore", category=FutureWarning)
        logging.getLogger("gspo_recipes").setLevel(logging.ERROR)
        return heldout_share(opts)
    torch.set_num_threads(opts.threads)
    warnings.filterwarnings("ignore", category=FutureWarning)  # transformers' renames, once per run
    logging.getLogger("gspo_recipes").setLevel(logging.ERROR)  # the health warnings are still checked, not printed
    measured_from = MINIBATCHES  # the first generation batch is warm-up

    print(
        f"per_device_train_batch_size={opts.batch_size}, num_generations={opts.num_generations}, "
        f"max_completion_length={opts.max_completion_length}, {MINIBATCHES} optimizer steps per generation batch, "
        f"logging_steps=1, torch threads={opts.threads}; {opts.repeats} repeats x {opts.steps} measured steps "
        f"(after {measured_from} warm-up steps) per arm\n"
    )
    print(
        f"{'':>15} {'-------- wall s/step --------':>30} {'-------- CPU s/step ---------':>32} "
        f"{'callbacks ms/step':>18}"
    )
    print(
        f"{'repeat':>6} {'order':>8} {'without':>10} {'with':>10} {'ratio':>7}   {'without':>10} {'with':>10} "
        f"{'ratio':>7} {'wall':>9} {'CPU':>8}"
    )
    rows = []  # per repeat: (without, with) step seconds for wall and CPU, and the callbacks' own ms
    per_step = {True: [], False: []}  # per arm, per repeat: [(wall, CPU) of each measured step]
    for r in range(opts.repeats):
        order = (True, False) if r % 2 == 0 else (False, True)
        result = {diagnostics: train_once(diagnostics, opts, measured_from) for diagnostics in order}
        on, off = result[True], result[False]
        for diagnostics in (True, False):
            per_step[diagnostics].append(result[diagnostics]["per_step"])
        rows.append(
            {
                "wall": (off["step"][0], on["step"][0]),
                "cpu": (off["step"][1], on["step"][1]),
                "callbacks_ms": tuple(1e3 * t for t in on["callbacks"]),
                "logging_cpu": (off["logging"][1], on["logging"][1]),
            }
        )
        print(f"{r + 1:>6} {'on,off' if order[0] else 'off,on':>8} {format_row(rows[-1])}", flush=True)
    median = {
        kind: tuple(statistics.median(row[kind][i] for row in rows) for i in (0, 1))
        for kind in ("wall", "cpu", "callbacks_ms")
    }
    print(f"{'median':>15} {format_row(median)}")
    for kind in ("wall", "cpu"):
        ratios = [row[kind][1] / row[kind][0] for row in rows]
        print(
            f"\n{kind} time per step, with / without callbacks: {median[kind][1] / median[kind][0]:.3f} (ratio of "
            f"medians); per-repeat ratios: median {statistics.median(ratios):.3f}, "
            f"range {min(ratios):.3f}-{max(ratios):.3f}"
        )
    # Load from other processes only ever adds time: the fastest of the repeats at each step is the closest to the
    # step's own cost, and both arms run the very same steps (the callbacks do not change training).
    for i, kind in enumerate(("wall", "cpu")):
        best = {arm: sum(min(run[j][i] for run in per_step[arm]) for j in range(opts.steps)) for arm in (True, False)}
        print(
            f"{kind} time, sum over steps of the fastest repeat of each step: without {best[False]:.3f} s, with "
            f"{best[True]:.3f} s, ratio {best[True] / best[False]:.3f}"
        )
    print(
        f"\ntime inside the two callbacks' on_step_end: {median['callbacks_ms'][1]:.2f} ms CPU per step = "
        f"{median['callbacks_ms'][1] / 1e3 / median['cpu'][0]:.2%} of a step's CPU time without them "
        f"({median['callbacks_ms'][0]:.2f} ms wall)"
    )
    log_ms = [statistics.median(1e3 * row["logging_cpu"][i] for row in rows) for i in (0, 1)]
    print(
        f"Trainer.log (runs after on_step_end; the callbacks add their metrics to it): {log_ms[0]:.2f} ms CPU per "
        f"step without them, {log_ms[1]:.2f} ms with them (+{(log_ms[1] - log_ms[0]) / 1e3 / median['cpu'][0]:.2%})"
    )
    added = (median["callbacks_ms"][1] + log_ms[1] - log_ms[0]) / 1e3 / median["cpu"][0]
    print(f"=> CPU time the callbacks add to a step, measured where it is spent: {added:.2%} (target: at most 2%)")

    print("\nMemory held by ResponseStats per logging window (run with the callbacks, every window):")
    sizes = {(n, b) for n, b, _ in on["held"]}
    for n, b in sorted(sizes):
        print(
            f"  {n} responses -> {b} bytes of tensors = {b / max(n, 1):.0f} bytes per response "
            f"({len(FIELDS)} float32 fields), over {max(c for _, _, c in on['held'])} micro-batch chunk(s)"
        )
    print("Same number of responses, very different lengths (synthetic, 512 responses in 32 micro-batches):")
    for length, n, b in synthetic_window_memory():
        print(f"  length {length:>6}: {n} responses -> {b} bytes = {b / n:.0f} bytes per response")
    # GSPOTrainer creates no ResponseStats without a consumer: the arm without callbacks records nothing at all.
    held_without = "nothing (no ResponseStats)" if off["leftover"] == 0 else f"{off['leftover'][0]} responses"
    print(
        f"Without the callbacks, after {off['steps_total']} steps the trainer holds {held_without}; with them it "
        f"holds {on['leftover'][0]} responses between windows."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
