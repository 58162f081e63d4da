"""gspo_recipes/_trl.py: what we assume about TRL's internals, pinned, and the rule for on-policy micro-steps.

A TRL upgrade that changes any of these fails here, naming the method, instead of training wrongly.
"""

import ast
import inspect
import pathlib

import pytest
import torch
import trl
from support import digit_count_reward, tiny_config
from trl import GRPOTrainer

from gspo_recipes import GSPOConfig, GSPOTrainer, _trl

PACKAGE = pathlib.Path(_trl.__file__).parent


@pytest.mark.parametrize("method", sorted(_trl.PINNED_SIGNATURES))
def test_trl_method_signatures_are_the_pinned_ones(method):
    assert hasattr(GRPOTrainer, method), (
        f"TRL {trl.__version__} has no GRPOTrainer.{method}: update gspo_recipes/_trl.py"
    )
    params = tuple(inspect.signature(getattr(GRPOTrainer, method)).parameters)
    assert params == _trl.PINNED_SIGNATURES[method], f"GRPOTrainer.{method} changed in TRL {trl.__version__}"


def test_gspo_trainer_takes_grpo_trainers_signature():
    """Names, order, kinds and defaults (reward_funcs optional, as in TRL 1.16): a class swap never breaks a call."""

    def described(function):
        return [(p.name, p.kind, p.default) for p in inspect.signature(function).parameters.values()]

    assert described(GSPOTrainer.__init__) == described(GRPOTrainer.__init__)


def test_trl_version_is_the_tested_one():
    assert trl.__version__.startswith(_trl.TESTED_TRL), "a new TRL: check every assumption in gspo_recipes/_trl.py"


def make_trainer(tmp_path, tiny, dataset, **overrides):
    model, tokenizer = tiny
    cfg = tiny_config(tmp_path, gspo_diagnostics=False, **overrides)
    return GSPOTrainer(
        model=model, reward_funcs=digit_count_reward, args=cfg, train_dataset=dataset, processing_class=tokenizer
    )


def test_trl_return_shapes_and_private_attributes(tmp_path, tiny, prompt_dataset):
    trainer = make_trainer(tmp_path, tiny, prompt_dataset, sampler_mismatch_steps=1)
    for name in _trl.PRIVATE_ATTRIBUTES:
        assert hasattr(trainer, name), f"GRPOTrainer instances no longer have {name}"
    seen = {}
    generate = trainer._generate

    def spy(prompts):
        seen["generate"] = result = generate(prompts)
        return result

    trainer._generate = spy
    trainer.model.train()
    batch = [{"prompt": row["prompt"]} for row in prompt_dataset.select(range(2)) for _ in range(4)]
    output = trainer._generate_and_score_completions(batch)
    result = seen["generate"]
    completion_ids = result[1]
    logprobs = result[_trl.GENERATE_LOGPROBS_INDEX]
    assert len(logprobs) == len(completion_ids) == 8
    assert all(len(lp) == len(ids) for lp, ids in zip(logprobs, completion_ids)), "logprobs moved in _generate"
    for key in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "advantages"):
        assert key in output, f"_generate_and_score_completions no longer returns {key}"
    logps, entropies, aux = _trl.score_completions(trainer, trainer.model, output, compute_entropy=True)
    assert logps.shape == entropies.shape == output["completion_ids"].shape and aux is None


@pytest.mark.parametrize(
    "gas,spg,iterations", [(1, 4, 1), (2, 8, 1), (2, 2, 1), (4, 2, 1), (2, 3, 1), (4, 3, 1), (1, 1, 2), (3, 1, 1)]
)
def test_recompute_rule_is_trls(tmp_path, tiny, prompt_dataset, gas, spg, iterations):
    """`recomputes_old_logps` says exactly when TRL's generation returns old log-probabilities."""
    trainer = make_trainer(
        tmp_path,
        tiny,
        prompt_dataset,
        gradient_accumulation_steps=gas,
        steps_per_generation=spg,
        num_iterations=iterations,
        per_device_train_batch_size=4,
    )
    trainer.model.train()
    batch = [{"prompt": row["prompt"]} for row in prompt_dataset.select(range(spg)) for _ in range(4)]
    output = trainer._generate_and_score_completions(batch)
    assert (output.get("old_per_token_logps") is not None) == _trl.recomputes_old_logps(trainer)
    assert _trl.has_off_policy_minibatches(trainer.args) == _trl.recomputes_old_logps(trainer)


@pytest.mark.parametrize("gas,spg,iterations", [(1, 4, 1), (2, 3, 1), (4, 3, 1), (2, 8, 1), (1, 2, 2), (3, 2, 1)])
def test_minibatch_index_counts_optimizer_steps_since_generation(tmp_path, tiny, prompt_dataset, gas, spg, iterations):
    """The label of every micro-step equals 1 + the optimizer steps taken since its responses were generated,
    observed in a real run, also where the generation batch does not line up with the optimizer steps and where an
    epoch ends on a shorter accumulation window (16 prompts of 4 per micro-step: gas=3 ends epoch 1 after one)."""
    trainer = make_trainer(
        tmp_path,
        tiny,
        prompt_dataset,
        gradient_accumulation_steps=gas,
        steps_per_generation=spg,
        num_iterations=iterations,
        per_device_train_batch_size=4,
        max_steps=6,
    )
    generated_at, observed = {}, []
    generate = trainer._generate_and_score_completions
    compute_loss = trainer._compute_loss

    def generation_spy(inputs):
        generated_at["step"] = trainer.state.global_step
        return generate(inputs)

    def loss_spy(model, inputs):
        observed.append((_trl.minibatch_index(trainer), trainer.state.global_step - generated_at["step"] + 1))
        return compute_loss(model, inputs)

    trainer._generate_and_score_completions = generation_spy
    trainer._compute_loss = loss_spy
    trainer.train()
    assert len(observed) >= 6  # an epoch can end on a shorter accumulation window
    assert max(label for label, _ in observed) > 1
    assert [label for label, _ in observed] == [truth for _, truth in observed]


def test_config_on_policy_rule_follows_trl(tmp_path):
    aligned = GSPOConfig(
        output_dir=str(tmp_path), gradient_accumulation_steps=4, steps_per_generation=2, report_to="none"
    )
    misaligned = GSPOConfig(
        output_dir=str(tmp_path),
        gradient_accumulation_steps=4,
        steps_per_generation=3,
        epsilon_calibration_steps=5,
        report_to="none",
    )
    assert not _trl.has_off_policy_minibatches(aligned)
    assert _trl.has_off_policy_minibatches(misaligned)  # steps 4, 5 of the second batch follow an update


def _imports_of(path: pathlib.Path, package: str) -> set[str]:
    """Modules of the package that a file imports, at any depth in the file."""
    module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")[: len(module.split(".")) - node.level + (path.name == "__init__.py")]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name.startswith(package)}


def test_no_import_cycle_in_the_package():
    files = {}
    for path in list(PACKAGE.rglob("*.py")) + list((PACKAGE.parent / "callbacks").glob("*.py")):
        if path.parent.name == "callbacks" and path.parent.parent == PACKAGE.parent:
            name = "gspo_recipes.callbacks" + ("" if path.name == "__init__.py" else f".{path.stem}")
            rel_source = path.read_text().replace("from .", "from gspo_recipes.callbacks.")
            tmp = ast.parse(rel_source)
            files[name] = {n for n in _names_from_tree(tmp) if n.startswith("gspo_recipes")}
            continue
        name = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")
        files[name] = _imports_of(path, "gspo_recipes")
    graph = {name: {dep for dep in deps if dep in files and dep != name} for name, deps in files.items()}
    # A package's __init__ re-exporting its own modules is not a cycle of imports between modules.
    for name in graph:
        graph[name] = {dep for dep in graph[name] if not name.startswith(dep + ".") or dep == "gspo_recipes"}
    graph["gspo_recipes"] = set()  # lazy attribute loading only (PEP 562)
    cycle = _find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def _names_from_tree(tree) -> set[str]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == "open":
                return stack[stack.index(dep) :] + [dep]
            if dep not in state and (found := visit(dep)):
                return found
        state[node] = "done"
        stack.pop()
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


# The package's layers, bottom to top: the first folder (or module) under gspo_recipes/ names a module's layer, and a
# module imports only from its own layer or those below it, anywhere in the file (a lazy import that climbs is still a
# climb). Layers on one row are independent features at the same height. `ls gspo_recipes/` shows this picture.
LAYERS = [
    {"loss"},  # the objective: math on tensors
    {"stats"},  # per-response statistics, health judges, calibration, groups, held-out estimators, entropy
    {"runfiles"},  # gspo_diagnostics.jsonl and the warnings recorded in it
    {"moe", "rewards", "builtin"},  # TRL-free features: MoE routes, reward functions, offline models and data
    {"_trl"},  # every assumption about TRL's internals
    {"sampler"},  # the sampler's log-probabilities and mask, read from TRL's batch
    {"callbacks"},  # the diagnostics callbacks (installed as gspo_recipes.callbacks)
    {"trainer"},  # GSPOConfig, its checks, the conversion, dynamic sampling, GSPOTrainer
    {"recipe", "recipe_setup"},  # what the recipes/ scripts and the commands share: arguments, data, model loading,
    # and the checks before set-up (paths, flags, output_dir, one-line errors)
    {"commands"},  # the `gspo` console script and its subcommands
]


def _layer_of(module: str) -> int | None:
    parts = module.split(".")
    if len(parts) < 2:
        return None  # gspo_recipes itself: lazy re-exports only
    return next(rank for rank, names in enumerate(LAYERS) if parts[1] in names)


def _package_files():
    for path in PACKAGE.rglob("*.py"):
        yield ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__"), path
    for path in (PACKAGE.parent / "callbacks").glob("*.py"):
        source = path.read_text().replace("from .", "from gspo_recipes.callbacks.")
        yield "gspo_recipes.callbacks" + ("" if path.name == "__init__.py" else f".{path.stem}"), source


def test_every_top_level_folder_is_a_layer():
    names = {p.stem for p in PACKAGE.iterdir() if p.name != "__init__.py" and (p.suffix == ".py" or p.is_dir())}
    names.discard("__pycache__")
    assert names | {"callbacks"} == set().union(*LAYERS)


def test_layers_import_downward_only():
    """A module imports only from its own layer or below (LAYERS); the objective imports nothing of ours but itself."""
    climbs = []
    for module, source in _package_files():
        tree = ast.parse(source.read_text() if isinstance(source, pathlib.Path) else source)
        if isinstance(source, pathlib.Path):
            imported = _imports_of(source, "gspo_recipes")
        else:
            imported = {n for n in _names_from_tree(tree) if n.startswith("gspo_recipes")}
        own = _layer_of(module)
        for dep in imported:
            rank = _layer_of(dep)
            if own is not None and rank is not None and rank > own:
                climbs.append(f"{module} imports {dep}")
    assert not climbs, "imports that climb a layer:\n" + "\n".join(sorted(climbs))
    assert {d for d in _imports_of(PACKAGE / "loss" / "objective.py", "gspo_recipes")} == set()
    assert torch  # torch is the only dependency of the math
