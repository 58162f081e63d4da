"""Run under `accelerate launch --cpu --num_processes 2`: each process records its own responses (different counts),
the window is gathered, and process 0 writes the metrics computed from it to the JSON file named in argv[1]."""

import json
import sys

import torch
from accelerate import Accelerator
from crafted_responses import responses_of_rank

from gspo_recipes.callbacks.clip_fraction import clip_fractions, one_token_fractions
from gspo_recipes.callbacks.log_ratio_histogram import log_s_summary
from gspo_recipes.stats.response_stats import ResponseStats, length_buckets

accelerator = Accelerator(cpu=True)
stats = ResponseStats()
for chunk in responses_of_rank(accelerator.process_index):
    stats.record(**chunk)
window = stats.window(step=1, accelerator=accelerator)
buckets = length_buckets(64)
selected = window["minibatch"] > 1
metrics = {
    **clip_fractions(window, buckets),
    **one_token_fractions(window, buckets, selected),
    **log_s_summary(window["log_s"][selected], window, selected, buckets),
}
if accelerator.is_main_process:
    with open(sys.argv[1], "w") as f:
        json.dump({"metrics": metrics, "responses": int(window["log_s"].numel())}, f)
# Tear the process group down before exit: leaving it to interpreter shutdown can abort a rank
# ("terminate called without an active exception") and fail the launch.
accelerator.wait_for_everyone()
torch.distributed.destroy_process_group()
