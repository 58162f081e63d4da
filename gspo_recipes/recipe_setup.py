"""The checks a recipe makes before it loads anything, and how a set-up error reaches the user.

Each check ends the run with one line that names the bad value and the fix: a model or dataset path that is not
there (checked before torch is imported, so within a second), a misspelled flag or YAML key (with the closest
names), a tracker or vLLM that is not installed, an output_dir that holds a finished run. `setup_errors()` turns any
other error raised while a run is set up (loading data, the model, the rewards, building the trainer) into one
message too; GSPO_DEBUG=1 shows the traceback instead (TrainingArguments owns `--debug`).
"""

from __future__ import annotations

import difflib
import importlib.util
import os
import re
import sys
from contextlib import contextmanager

import gspo_recipes.builtin as builtin
from gspo_recipes.runfiles.output_dir import previous_run, remove_report, remove_run

DEBUG_ENV = "GSPO_DEBUG"
# A hub name: `name` or `namespace/name` (huggingface_hub's rule); anything else that is not on disk is a bad path.
HUB_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")
# Packages a flag value needs, and the extra of this package that installs them.
TRACKERS = {"tensorboard": ("tensorboard", "report"), "wandb": ("wandb", None), "trackio": ("trackio", None)}
LOCAL_FILE_TYPES = (".jsonl", ".json", ".parquet", ".csv")  # a dataset name with one of these is a file, not a hub name
EXTRA_OF_MODULE = {"matplotlib": "report", "tensorboard": "report", "vllm": "vllm"}


def fail(message: str, code: int = 2):
    """End the run with `message` on stderr (one line per cause), before anything slow."""
    print(f"error: {message}", file=sys.stderr)
    sys.exit(code)


def check_names(values: dict[str, str | None]) -> None:
    """Fail on a `model_name_or_path`, `dataset_name` or `heldout_dataset` that names a local path that is not
    there, or a `builtin:` name that does not exist. Hub names are left to the hub."""
    for flag, value in values.items():
        if not value:
            continue
        if builtin.is_builtin(value):
            table = builtin.MODELS if flag == "model_name_or_path" else builtin.DATASETS
            if value.removeprefix(builtin.PREFIX) not in table:
                known = ", ".join(builtin.PREFIX + name for name in table)
                fail(f"--{flag} {value}: no such built-in. Use one of {known}, a hub name or a local path.")
            continue
        path = os.path.expanduser(value)
        if os.path.exists(path):
            if flag == "model_name_or_path" and os.path.isdir(path) and not _is_model_folder(path):
                fail(
                    f"--{flag} {value}: the folder holds no config.json or adapter_config.json, so it is not a saved "
                    "model. Give the folder that save_pretrained() wrote (or a checkpoint-N folder inside it)."
                )
            continue
        local_file = flag != "model_name_or_path" and os.path.splitext(value)[1].lower() in LOCAL_FILE_TYPES
        if local_file or not HUB_NAME.match(value) or value.startswith((".", "~")):
            what = "model folder" if flag == "model_name_or_path" else "dataset file or folder"
            example = "Qwen/Qwen2.5-0.5B-Instruct" if flag == "model_name_or_path" else "openai/gsm8k"
            fail(
                f"--{flag} {value}: no such {what} (looked in {os.path.abspath(path)}). Fix the path, or give a hub "
                f"name such as {example}."
            )
        if flag == "model_name_or_path" and _hub_offline() and not _in_hub_cache(value):
            fail(
                f"--{flag} {value}: not in the local hub cache, and HF_HUB_OFFLINE is set. Download it once with "
                f"network (hf download {value}), or give a local model folder."
            )


def _hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")


def _in_hub_cache(repo_id: str) -> bool:
    from huggingface_hub import try_to_load_from_cache

    return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)


def _is_model_folder(path: str) -> bool:
    return any(os.path.isfile(os.path.join(path, name)) for name in ("config.json", "adapter_config.json"))


def names_in_command_line(argv: list[str], config: dict, flags: tuple[str, ...]) -> dict[str, str | None]:
    """The value of each of `flags` as the parser will see it: the last one on the command line, else the YAML's."""
    values = {flag: config.get(flag) for flag in flags}
    for i, arg in enumerate(argv):
        for flag in flags:
            if arg == f"--{flag}" and i + 1 < len(argv):
                values[flag] = argv[i + 1]
            elif arg.startswith(f"--{flag}="):
                values[flag] = arg.split("=", 1)[1]
    return values


def read_config(argv: list[str]) -> dict:
    """The YAML mapping that `--config` names (empty without one); fails in one line when it cannot be read."""
    import yaml

    path = next((argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == "--config"), None)
    if path is None:
        return {}
    try:
        with open(path) as f:
            config = yaml.safe_load(f)
    except OSError as error:
        fail(f"--config {path}: {error.strerror}. Give the path of a YAML file such as recipes/configs/*.yaml.")
    except yaml.YAMLError as error:
        fail(f"--config {path}: not valid YAML ({str(error).splitlines()[0]}).")
    if not isinstance(config, dict):
        fail(f"--config {path}: the file must hold a YAML mapping of field: value.")
    return config


def check_spelling(parser, argv: list[str], config: dict) -> None:
    """Fail on a flag or YAML key that no dataclass of `parser` has, naming the closest ones."""
    known = {option for action in parser._actions for option in action.option_strings}
    known.add("--config")
    unknown = [arg.split("=", 1)[0] for arg in argv if arg.startswith("--") and arg.split("=", 1)[0] not in known]
    unknown += [f"--{key}" for key in config if key != "env" and f"--{key}" not in known]
    if not unknown:
        return
    hints = []
    spelled = sorted(option for option in known if "-" not in option[2:])  # not the --dashed-alias of each
    for name in dict.fromkeys(unknown):
        close = difflib.get_close_matches(name, spelled, n=3, cutoff=0.75)
        source = name if name in argv or any(a.startswith(name + "=") for a in argv) else f"{name[2:]} (YAML key)"
        hints.append(f"{source}: did you mean {' or '.join(close)}?" if close else f"{source}: no such option.")
    fail("unknown option " + " ".join(hints) + " (--help lists them all)")


def check_extras(training_args) -> None:
    """Fail when `report_to` or `use_vllm` needs a package that is not installed, naming the install command, and
    when `vllm_mode="server"` cannot train on this machine (no CUDA device)."""
    report_to = training_args.report_to or []
    needed = [TRACKERS[name] for name in ([report_to] if isinstance(report_to, str) else report_to) if name in TRACKERS]
    if getattr(training_args, "use_vllm", False):
        needed.append(("vllm", "vllm"))
    for module, extra in needed:
        if importlib.util.find_spec(module) is None:
            fail(f"{module} is not installed (the run needs it for its settings). {install_hint(module, extra)}")
    from gspo_recipes.trainer.engine import vllm_server_refusal

    server_refusal = vllm_server_refusal(training_args)
    if server_refusal:
        fail(server_refusal)


def install_hint(module: str, extra: str | None = None) -> str:
    extra = extra or EXTRA_OF_MODULE.get(module)
    return (
        f"Install it with: pip install 'gspo-recipes[{extra}]'" if extra else f"Install it with: pip install {module}"
    )


def claim_output_dir(training_args, overwrite: bool) -> None:
    """Resume, refuse or start over, by what `output_dir` holds (see gspo_recipes/runfiles/output_dir.py).

    A finished run is never trained over without `--overwrite_output_dir`; a run cut short resumes from its last
    checkpoint, and says so; `--resume_from_checkpoint` given by hand is taken as it is. Starting over removes the
    previous run's checkpoints, diagnostics and report, so that none of them is read as the new run's."""
    output_dir = training_args.output_dir
    if training_args.resume_from_checkpoint:
        _on_main(remove_report, output_dir)
        return
    run = previous_run(output_dir)
    if run is None:
        return
    if overwrite:
        _on_main(remove_run, output_dir)
        _say(f"--overwrite_output_dir: starting over in {output_dir} (the previous run's files are removed)")
    elif run.finished:
        steps = f" ({run.step} steps)" if run.step is not None else ""
        fail(
            f"{output_dir} holds a finished run{steps}. Give another --output_dir, or --overwrite_output_dir to "
            "replace it."
        )
    elif run.checkpoint is None:
        fail(
            f"{output_dir} holds a run that stopped before its first checkpoint, so there is nothing to resume. Give "
            "another --output_dir, or --overwrite_output_dir to start over there."
        )
    else:
        training_args.resume_from_checkpoint = run.checkpoint
        _on_main(remove_report, output_dir)
        _say(
            f"Resuming the unfinished run in {output_dir} from {os.path.basename(run.checkpoint)} (step {run.step} of "
            f"{training_args.max_steps if training_args.max_steps > 0 else '?'}); --overwrite_output_dir starts over."
        )


def _is_main() -> bool:
    return int(os.environ.get("RANK", "0")) == 0


def _on_main(function, *args) -> None:
    if _is_main():
        function(*args)


def _say(line: str) -> None:
    if _is_main():
        print(line, flush=True)


@contextmanager
def setup_errors():
    """Any error raised inside ends the run with one message naming its cause (GSPO_DEBUG=1: the traceback).

    Recipes wrap everything before `trainer.train()` in it: an error there comes from the command line, the data,
    the model files or the machine (a missing package, a sandbox that cannot start), and the user fixes it from the
    message; a traceback into transformers does not say which flag to change."""
    try:
        yield
    except Exception as error:
        if os.environ.get(DEBUG_ENV) == "1":
            raise
        print(f"error: {describe_error(error)}", file=sys.stderr)
        print(f"(set {DEBUG_ENV}=1 to see the traceback)", file=sys.stderr)
        sys.exit(1)


def describe_error(error: Exception) -> str:
    """The first paragraph of the error's message, prefixed by its type unless the message is ours already."""
    if isinstance(error, ModuleNotFoundError) and error.name:
        module = error.name.split(".")[0]
        return f"{module} is not installed. {install_hint(module)}"
    text = str(error).strip().split("\n\n")[0] or type(error).__name__
    return text if type(error).__module__.startswith("gspo_recipes") else f"{type(error).__name__}: {text}"
