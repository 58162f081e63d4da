"""EntropyCollapseCallback: a health warning when the completions' token entropy collapses.

Drop-in for any TRL `GRPOTrainer`, any loss type and any `logging_strategy` (it reads the `entropy` metric TRL logs at
every log):

    trainer.add_callback(EntropyCollapseCallback(trainer))

The rule and its defaults are gspo_recipes/stats/entropy.py's: the warning fires when each of the last 5 logged
windows has a mean token entropy under 30% of the early level (the mean of the first 5 logged windows). The warning
names the fixes with the values in force: TRL's entropy bonus (`entropy_coef`, or `use_adaptive_entropy` with an
`entropy_target`), a higher `temperature`, a wider `epsilon_high` (the trainer's, after any calibration). It goes to
the diagnostics file too (`record_warning`), so `gspo report` lists it: add this callback before
`LogRatioHistogramCallback` so that it lands in the line of the step it fired at. On resume the check replays the
entropy in the checkpoint's log history, so a resumed run reaches the verdict the uninterrupted one would. Copy this
file into your project freely; it needs gspo-recipes installed.
"""

from __future__ import annotations

import logging

from transformers import TrainerCallback

from gspo_recipes._trl import applied_clip, entropy_bonus_enabled
from gspo_recipes.runfiles.run_warnings import record_warning
from gspo_recipes.stats.entropy import KIND, EntropyCollapseCheck

logger = logging.getLogger(__name__)

METRIC = "entropy"  # TRL's name for the mean per-token entropy of the completions (training logs)


class EntropyCollapseCallback(TrainerCallback):
    """The entropy collapse warning (module docstring). Arguments after `trainer` are `EntropyCollapseCheck`'s."""

    def __init__(self, trainer, fraction: float = 0.3, early_windows: int = 5, window: int = 5,
                 warmup_windows: int = 0):  # fmt: skip
        self.trainer = trainer
        self.settings = dict(fraction=fraction, early_windows=early_windows, window=window,
                             warmup_windows=warmup_windows)  # fmt: skip
        self.check = EntropyCollapseCheck(**self.settings)
        self.history: list[dict] = []  # every warning given: {"step", "kind", "message"}

    def on_train_begin(self, args, state, control, **kwargs):
        # The Trainer has loaded the checkpoint's log history by now (empty on a fresh run): replaying it restores the
        # early level, the window and whether the warning is active, exactly as they stood at the checkpoint.
        self.check = EntropyCollapseCheck(**self.settings)
        for entry in state.log_history:
            if METRIC in entry:
                self.check.update(entry[METRIC], entry.get("step"))

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs or METRIC not in logs:  # evaluation logs carry eval_entropy
            return
        if not self.check.update(logs[METRIC], state.global_step):
            return
        message = self.message(logs[METRIC])
        if self.trainer.accelerator.is_main_process:  # the logged entropy is gathered: every process decides alike
            logger.warning(message)
        self.history.append({"step": state.global_step, "kind": KIND, "message": message})
        record_warning(self.trainer, KIND, message)

    def message(self, entropy: float) -> str:
        check, trainer = self.check, self.trainer
        first, last = check.early_steps()
        fixes = [self._bonus_fix(), f"a higher temperature (now {trainer.args.temperature:g})"]
        if applied_clip(trainer) is not None or trainer.loss_type == "cispo":
            # The range in force: GSPOTrainer's calibration changes the trainer's epsilon_high, not args'.
            fixes.append(f"a wider epsilon_high (now {trainer.epsilon_high:g}) so that unlikely tokens can still grow")
        return (
            f"GSPO health: token entropy has stayed under {check.fraction:.0%} of its early level for the last "
            f"{check.window} logged windows (now {entropy:.3g} nats; early level {check.early_level:.3g}, the mean of "
            f"steps {first}-{last}): the policy is collapsing onto a few answers, the responses of a group agree and "
            f"exploration stops. Fix: {'; '.join(fixes)}. Watch the `entropy` metric."
        )

    def _bonus_fix(self) -> str:
        trainer = self.trainer
        target = self.check.early_level * 0.5
        if not entropy_bonus_enabled(trainer):
            return (
                f"TRL's entropy bonus (entropy_coef, e.g. 0.001, or use_adaptive_entropy=True with entropy_target "
                f"near {target:.2g})"
            )
        if getattr(trainer.args, "use_adaptive_entropy", False):
            return (
                f"raise TRL's adaptive entropy target (entropy_target={trainer.args.entropy_target:g}; try "
                f"{target:.2g}) or its entropy_coef_max ({trainer.args.entropy_coef_max:g})"
            )
        coef = getattr(trainer, "entropy_coef", trainer.args.entropy_coef)  # TRL's, as its controller left it
        return f"a larger entropy bonus (entropy_coef is {coef:g})"
