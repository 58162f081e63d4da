"""LogRatioHistogramCallback: the distribution of log s_i, to trackers and to `<output_dir>/gspo_diagnostics.jsonl`.

Drop-in for any TRL `GRPOTrainer` with `importance_sampling_level="sequence"`:

    trainer.add_callback(LogRatioHistogramCallback(trainer))

At every logging step, over the off-policy responses seen since the previous one (minibatches 2..k; on minibatch 1
log s_i is 0 by construction) and gathered from all processes, it logs `gspo/log_s/{mean,std,min,max,p05,p50,p95}`
and `gspo/log_s_std/len_{lo}-{hi}`; sends a histogram to TensorBoard, Weights & Biases and trackio when they are in
`report_to`; and appends one JSON line to `gspo_diagnostics.jsonl` (read by `gspo report` and `gspo calibrate`).
The run's last step closes a window too (`window_ends`), so no response is left out when max_steps is not a
multiple of logging_steps. On resume the file keeps the lines up to the checkpoint's step and continues from there,
and the responses and staged sections (group counts) of the window open at the checkpoint (saved with it) count in
the next line. Other callbacks add
sections to a line by putting them in `trainer.gspo_diagnostics_sections` in their `on_step_end` when `window_ends`
(the line is written at `on_log`, after every callback's `on_step_end`). Each line also records whether the clip
range was being calibrated (`calibrating`), whether it changed within the window (`clip_range_changed`) and which
clip the loss applied (`applied_clip`: "sequence", "token" or None), so that `gspo report` replays the health
warnings as the run judged them. Copy this file into your project freely; it
needs gspo-recipes installed.
"""

from __future__ import annotations

import logging
import os

import torch
from transformers import TrainerCallback

from gspo_recipes._trl import (
    add_to_trainer_logs,
    applied_clip,
    attach_response_stats,
    has_off_policy_minibatches,
    record_resumed_checkpoint,
    resumed_checkpoint,
)
from gspo_recipes.callbacks.clip_fraction import calibrating
from gspo_recipes.runfiles.diagnostics import (
    append_line,
    diagnostics_path,
    keep_lines_up_to,
    load_open_sections,
    save_open_sections,
)
from gspo_recipes.stats.response_stats import bucket_label, checkpoint_folder, off_policy_responses, window_ends
from gspo_recipes.stats.response_stats import length_buckets as make_length_buckets

logger = logging.getLogger(__name__)


class LogRatioHistogramCallback(TrainerCallback):
    """Statistics and histogram of log s_i, and the diagnostics file.

    Args:
        trainer: the `GRPOTrainer` (or `GSPOTrainer`) to watch.
        bins: number of histogram bins (spanning the window's range of log s_i).
        length_buckets: upper bounds of the length buckets in tokens (default: powers of two up to
            `max_completion_length`).
    """

    def __init__(self, trainer, bins: int = 41, length_buckets: list[int] | None = None):
        self.trainer = trainer
        self.stats = attach_response_stats(trainer)
        record_resumed_checkpoint(trainer)  # to restore the open window from the checkpoint train() resumes from
        self.bins = bins
        self.buckets = make_length_buckets(trainer.args.max_completion_length, length_buckets)
        self.path = diagnostics_path(trainer.args.output_dir)
        self.pending_line: dict | None = None  # built at on_step_end, written at on_log
        self.closed_at: int | None = None  # the step whose log the last window went out with
        self.clip_ranges: set[tuple[float, float]] = set()  # the clip ranges the current window's steps trained with
        trainer.__dict__.setdefault("gspo_diagnostics_sections", {})  # other callbacks' additions to the next line

    def on_train_begin(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            os.makedirs(args.output_dir, exist_ok=True)
            keep_lines_up_to(self.path, state.global_step)
        if state.global_step > 0:  # resumed: the responses of the window that was open at the checkpoint
            folder = resumed_checkpoint(self.trainer) or checkpoint_folder(args, state)
            self.stats.restore_open_window(folder, state.is_world_process_zero)
            # and the sections staged for its line (group and dynamic-sampling counts), which the line writes
            for name, section in load_open_sections(folder).items():
                self.trainer.gspo_diagnostics_sections.setdefault(name, section)

    def on_save(self, args, state, control, **kwargs):
        self.stats.save_open_window(
            checkpoint_folder(args, state), state.global_step, self.trainer.accelerator, state.is_world_process_zero
        )
        if state.is_world_process_zero:  # the process that writes the lines
            save_open_sections(checkpoint_folder(args, state), self.trainer.gspo_diagnostics_sections)

    def on_step_end(self, args, state, control, **kwargs):
        # The range this step's loss clipped with (calibration changes it at the start of a step's loss).
        self.clip_ranges.add((self.trainer.epsilon_low, self.trainer.epsilon_high))
        if window_ends(state, control):
            self.close_window(args, state)

    def close_window(self, args, state) -> None:
        """Build the window's statistics and line (once per step), as ClipFractionByLengthCallback.close_window."""
        if self.closed_at == state.global_step:
            return
        self.closed_at = state.global_step
        window = self.stats.window(state.global_step, self.trainer.accelerator)
        ranges, self.clip_ranges = self.clip_ranges, set()
        if window["log_s"].numel() == 0:
            return
        selected = off_policy_responses(window, not has_off_policy_minibatches(self.trainer.args))
        log_s = window["log_s"][selected]
        counts, edges = [], []
        if log_s.numel():  # a window of on-policy minibatches only has no distribution to show
            add_to_trainer_logs(self.trainer, log_s_summary(log_s, window, selected, self.buckets))
            counts, edges = histogram(log_s, self.bins)
            if state.is_world_process_zero:
                send_histogram_to_trackers(self.trainer, args, state.global_step, log_s, counts, edges)
        self.pending_line = diagnostics_line(
            state.global_step, window, selected, counts, edges, self.buckets, self.trainer
        )
        # What `gspo report` needs to replay the clip health warnings as the run judged them: whether the window's
        # clips were made under one range, and whether the loss applied this clip at all.
        self.pending_line["clip_range_changed"] = len(ranges) > 1
        self.pending_line["calibrating"] = calibrating(self.trainer)
        self.pending_line["applied_clip"] = applied_clip(self.trainer)

    def on_log(self, args, state, control, **kwargs):
        sections = self.trainer.gspo_diagnostics_sections
        line, self.pending_line = self.pending_line, None
        if line is None and sections:  # another callback logged at a step without responses
            line = {"step": state.global_step}
        if line is None or line["step"] != state.global_step:
            return
        line.update(sections)
        sections.clear()
        if state.is_world_process_zero:
            append_line(self.path, line)

    def on_train_end(self, args, state, control, **kwargs):
        # The last window's line goes out with the Trainer's closing summary log; should that log not come, here. So
        # do sections staged after the last line was written (a warning given in a later callback's on_log).
        if self.pending_line is not None or self.trainer.gspo_diagnostics_sections:
            self.on_log(args, state, control)


def log_s_summary(log_s, window, selected, buckets) -> dict[str, float]:
    quantiles = torch.quantile(log_s.double(), torch.tensor([0.05, 0.5, 0.95], dtype=torch.float64))
    metrics = {
        "gspo/log_s/mean": log_s.mean().item(),
        "gspo/log_s/std": log_s.std(correction=0).item(),
        "gspo/log_s/min": log_s.min().item(),
        "gspo/log_s/max": log_s.max().item(),
        "gspo/log_s/p05": quantiles[0].item(),
        "gspo/log_s/p50": quantiles[1].item(),
        "gspo/log_s/p95": quantiles[2].item(),
    }
    for lo, hi in buckets:
        in_bucket = selected & (window["length"] >= lo) & (window["length"] <= hi)
        if in_bucket.any():
            metrics[f"gspo/log_s_std/{bucket_label(lo, hi)}"] = window["log_s"][in_bucket].std(correction=0).item()
    return metrics


def histogram(values: torch.Tensor, bins: int) -> tuple[list[int], list[float]]:
    """Counts and bin edges over the values' range (a tiny symmetric range when they are all equal)."""
    lo, hi = values.min().item(), values.max().item()
    if hi - lo < 1e-12:
        lo, hi = lo - 1e-6, hi + 1e-6
    counts = torch.histc(values.double(), bins=bins, min=lo, max=hi)
    edges = torch.linspace(lo, hi, bins + 1, dtype=torch.float64)
    return [int(c) for c in counts.tolist()], edges.tolist()


def diagnostics_line(step, window, selected, counts, edges, buckets, trainer) -> dict:
    """One JSON line: the histogram, per-bucket and per-minibatch clip counts (with the one-token clips among them),
    and the off-policy log s_i."""
    per_bucket = []
    for lo, hi in buckets:
        in_bucket = (window["length"] >= lo) & (window["length"] <= hi)
        spread = window["log_s"][in_bucket & selected]
        per_bucket.append(
            {
                "lo": lo,
                "hi": hi,
                "responses": int(in_bucket.sum()),
                "clipped_low": int(window["clipped_low"][in_bucket].sum()),
                "clipped_high": int(window["clipped_high"][in_bucket].sum()),
                # the clipped ones one token clips (loss.one_token_clips)
                "one_token": int((window["one_token"][in_bucket] > 0).sum()),
                "log_s_std": spread.std(correction=0).item() if spread.numel() else None,
            }
        )
    per_minibatch = {}
    for k in sorted(set(window["minibatch"].long().tolist())):
        of_k = window["minibatch"] == k
        per_minibatch[str(k)] = {
            "responses": int(of_k.sum()),
            "clipped_low": int(window["clipped_low"][of_k].sum()),
            "clipped_high": int(window["clipped_high"][of_k].sum()),
        }
    later = window["minibatch"] > 1
    return {
        "step": step,
        "epsilon_low": trainer.epsilon_low,
        "epsilon_high": trainer.epsilon_high,
        # L_ref of a length-scaled range (response i clipped with epsilon * sqrt(L_ref / L_i)); null: the plain range.
        "epsilon_reference_length": getattr(trainer, "epsilon_reference_length", None),
        "max_completion_length": trainer.args.max_completion_length,
        "responses": int(window["log_s"].numel()),
        "bin_edges": edges,
        "counts": counts,
        "buckets": per_bucket,
        "minibatches": per_minibatch,
        # Raw off-policy values (4 significant digits) so that `gspo calibrate` can take exact quantiles.
        "off_policy": {
            "log_s": [float(f"{v:.4g}") for v in window["log_s"][later].tolist()],
            "advantage_sign": [int(v) for v in torch.sign(window["advantage"][later]).tolist()],
            # The advantages themselves, for the length-advantage correlation of the health check on replay.
            "advantage": [float(f"{v:.4g}") for v in window["advantage"][later].tolist()],
            "length": [int(v) for v in window["length"][later].tolist()],
            # Per one-token clip the |log-ratio| of the token that alone clips it, 0 elsewhere
            "one_token": [float(f"{v:.3g}") for v in window["one_token"][later].tolist()],
        },
    }


def send_histogram_to_trackers(trainer, args, step, values, counts, edges) -> None:
    report_to = args.report_to or []
    if "tensorboard" in report_to:
        writer = _tensorboard_writer(trainer)
        if writer is not None:
            writer.add_histogram("gspo/log_s", values.numpy(), step)
            writer.flush()
    if "wandb" in report_to:
        import wandb

        if wandb.run is not None:
            # commit=False: attach to the row the WandbCallback logs for this step
            wandb.log({"gspo/log_s_histogram": wandb.Histogram(np_histogram=(counts, edges))}, commit=False)
    if "trackio" in report_to:
        try:
            import trackio

            trackio.log({"gspo/log_s_histogram": trackio.Histogram(values.tolist())}, step=step)
        except (ImportError, AttributeError) as error:  # older trackio has no Histogram
            logger.warning("trackio histogram of log s_i skipped: %s", error)


def _tensorboard_writer(trainer):
    from transformers.integrations import TensorBoardCallback

    for callback in trainer.callback_handler.callbacks:
        if isinstance(callback, TensorBoardCallback):
            return callback.tb_writer
    return None
