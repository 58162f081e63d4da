"""Route recording, Routing Replay and routing volatility on tiny models of every supported MoE family."""

from __future__ import annotations

import types

import pytest
import torch
from support import assert_close_to_rounding, assert_grads_close

from gspo_recipes.moe import (
    MOE_FAMILIES,
    RouteRecorder,
    RoutingReplay,
    build_tiny_moe,
    check_routing_replay_supported,
    completion_routes,
    find_moe_layers,
    is_moe_model,
    routing_change,
    split_routes_per_response,
    stack_routes,
)

# Families whose weight rule gives unchosen experts exactly zero weight whatever their logit, so their router rows
# get no gradient; the others (plain softmax over all experts) pass gradient to every row through the denominator.
ZERO_GRAD_FOR_UNCHOSEN = {"qwen3_moe", "mixtral", "gpt_oss", "deepseek_v3", "glm4_moe"}


def token_logps(model, ids):
    logits = model(ids).logits.float()
    return torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)


def sample_ids(batch=3, seq=12, seed=1):
    return torch.randint(3, 64, (batch, seq), generator=torch.Generator().manual_seed(seed))


class ExpertsInputs:
    """Captures the top-k expert sets each experts module actually receives (what the layer computes with)."""

    def __init__(self, model):
        self.layers = find_moe_layers(model)
        self.seen: list[torch.Tensor] = []

    def __enter__(self):
        self.handles = [
            layer.experts.register_forward_pre_hook(lambda m, args: self.seen.append(args[1].sort(-1).values))
            for layer in self.layers
        ]
        return self

    def __exit__(self, *exc):
        for handle in self.handles:
            handle.remove()

    def as_routes(self, batch, seq):
        return torch.stack([s.reshape(batch, seq, -1) for s in self.seen], dim=2)


def perturb_routers(model, scale=1.0, seed=5):
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for layer in find_moe_layers(model):
            weight = layer.router.weight
            weight.add_(torch.randn(weight.shape, generator=generator) * scale)


@pytest.mark.parametrize("family", MOE_FAMILIES)
def test_recording_leaves_logits_unchanged_and_records_the_experts_used(family):
    model = build_tiny_moe(family)
    ids = sample_ids()
    with torch.no_grad():
        plain = model(ids).logits
        with RouteRecorder(model) as recorder, ExpertsInputs(model) as used:
            recorded = model(ids).logits
    assert torch.equal(plain, recorded)
    routes = recorder.routes()
    assert routes.shape == (3, 12, 2, 2)
    assert torch.equal(routes.long(), used.as_routes(3, 12).long())
    assert (routes[..., 0] < routes[..., 1]).all()  # sorted, and k distinct experts per token


def test_recorder_joins_chunked_calls_and_ignores_calls_after_exit():
    model = build_tiny_moe("qwen3_moe")
    ids = sample_ids(batch=4)
    with torch.no_grad():
        with RouteRecorder(model) as whole:
            model(ids)
        with RouteRecorder(model) as chunked:
            model(ids[:3])
            model(ids[3:])
        model(ids)  # outside the context: not recorded
    assert len(chunked.calls) == 2
    assert torch.equal(chunked.routes(), whole.routes())


@pytest.mark.parametrize("family", MOE_FAMILIES)
def replayed_and_plain_gradients(family):
    """Gradients of the same pass with natural routing and with its routes replayed; the routes actually used."""
    model = build_tiny_moe(family)
    ids = sample_ids()
    with RouteRecorder(model) as recorder:
        logps = token_logps(model, ids)
    logps.sum().backward()
    plain_grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    with RoutingReplay(model, recorder.routes()), ExpertsInputs(model) as used:
        replayed = token_logps(model, ids)
        replayed.sum().backward()
    assert torch.equal(used.as_routes(3, 12).long(), recorder.routes().long())
    assert_close_to_rounding(replayed, logps, "log-probabilities")
    replayed_grads = {name: p.grad.clone() for name, p in model.named_parameters() if name in plain_grads}
    return replayed_grads, plain_grads


@pytest.mark.parametrize("family", MOE_FAMILIES)
def test_replay_reproduces_the_recorded_pass_and_its_gradients(family):
    assert_grads_close(*replayed_and_plain_gradients(family))


def test_gradient_comparison_passes_rounding_at_any_scale_and_catches_a_1e_4_error():
    """The suite's gradient comparison (support.assert_grads_close) on gpt_oss's replay gradients: a float32 rounding
    difference of 1e-6 relative passes on a tensor of any scale (another CPU; a fixed atol=1e-6 fails once the
    tensor's scale passes 1), and an error of 1e-4, relative or absolute, in one element is caught."""
    replayed, plain = replayed_and_plain_gradients("gpt_oss")
    name = "model.layers.0.self_attn.o_proj.bias"
    for factor in (1.0, 1e3):  # the same gradient at its own scale and a thousand times larger
        scaled = {n: g * factor for n, g in plain.items()}
        rounded = {n: g * (1 + 1e-6 * torch.randn_like(g).sign()) for n, g in scaled.items()}
        assert_grads_close(rounded, scaled)
    scale = plain[name].abs().max().item()
    for error in (1e-4 * scale, 1e-4):
        wrong = {n: g.clone() for n, g in plain.items()}
        wrong[name].view(-1)[0] += error
        with pytest.raises(AssertionError, match="o_proj.bias"):
            assert_grads_close(wrong, plain)


@pytest.mark.parametrize("implementation", ["eager", "batched_mm", "grouped_mm"])
def test_replay_is_exact_with_each_experts_implementation(implementation):
    model = build_tiny_moe("qwen2_moe")
    model.set_experts_implementation(implementation)
    ids = sample_ids()
    with torch.no_grad():
        with RouteRecorder(model) as recorder:
            logps = token_logps(model, ids)
        with RoutingReplay(model, recorder.routes()):
            replayed = token_logps(model, ids)
    assert (replayed - logps).abs().max().item() <= 1e-6


@pytest.mark.parametrize("family", MOE_FAMILIES)
def test_replay_forces_old_experts_after_the_routers_change(family):
    model = build_tiny_moe(family)
    ids = sample_ids()
    with torch.no_grad(), RouteRecorder(model) as old:
        model(ids)
    perturb_routers(model)
    with torch.no_grad():
        with RouteRecorder(model) as plain:
            model(ids)
        with RoutingReplay(model, old.routes()), ExpertsInputs(model) as used, RouteRecorder(model) as under_replay:
            model(ids)
    mask = torch.ones(3, 12)
    assert routing_change(old.routes(), plain.routes(), mask)["changed_frac"] > 0.2  # the update flips many routes
    assert torch.equal(used.as_routes(3, 12).long(), old.routes().long())  # replay computes with the old experts
    # ... while a recorder under replay sees what the current router would choose: in the first MoE layer that is
    # the plain forward's choice (deeper layers see hidden states already shaped by the replayed experts).
    assert torch.equal(under_replay.routes()[:, :, 0], plain.routes()[:, :, 0])
    assert not torch.equal(under_replay.routes(), old.routes())


@pytest.mark.parametrize("family", MOE_FAMILIES)
def test_gradients_reach_the_replayed_experts_router_rows(family):
    model = build_tiny_moe(family)
    ids = sample_ids()
    forced = torch.zeros(3, 12, 2, 2, dtype=torch.long)
    forced[..., 1] = 1  # every token in every layer uses experts {0, 1}
    with RoutingReplay(model, forced):
        token_logps(model, ids).sum().backward()
    for layer in find_moe_layers(model):
        row_norms = layer.router.weight.grad.norm(dim=1)
        assert (row_norms[:2] > 0).all(), (family, layer.name, row_norms)
        if family in ZERO_GRAD_FOR_UNCHOSEN:
            assert row_norms[2:].max() <= 1e-5 * row_norms[:2].min(), (family, layer.name, row_norms)
        else:
            assert (row_norms[2:] > 1e-4 * row_norms[:2].min()).all(), (family, layer.name, row_norms)


def checkpointed_replay_step(family, routes, ids, use_reentrant):
    model = build_tiny_moe(family)
    perturb_routers(model)
    model.train()
    if use_reentrant is not None:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": use_reentrant})
    router_calls = []
    handles = [
        layer.router.register_forward_hook(lambda *a: router_calls.append(1)) for layer in find_moe_layers(model)
    ]
    with RoutingReplay(model, routes), RouteRecorder(model) as recorder:
        loss = -token_logps(model, ids).mean()
        loss.backward()
    for handle in handles:
        handle.remove()
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    return loss.item(), grads, len(router_calls), len(recorder.calls)


@pytest.mark.parametrize("family", ["qwen3_moe", "deepseek_v3"])
@pytest.mark.parametrize("use_reentrant", [True, False])
def test_replay_holds_through_gradient_checkpointing(family, use_reentrant):
    ids = sample_ids()
    model = build_tiny_moe(family)  # routes of the unperturbed model: replay then differs from natural routing
    with torch.no_grad(), RouteRecorder(model) as old:
        model(ids)
    loss, grads, calls, recorded = checkpointed_replay_step(family, old.routes(), ids, use_reentrant=None)
    ckpt_loss, ckpt_grads, ckpt_calls, ckpt_recorded = checkpointed_replay_step(
        family, old.routes(), ids, use_reentrant
    )
    assert ckpt_calls == 2 * calls  # each router ran again in backward, so the recomputation was replayed
    assert recorded == ckpt_recorded == 1  # recomputations are not recorded twice
    assert abs(loss - ckpt_loss) <= 1e-6
    assert_grads_close(ckpt_grads, grads)


def test_replay_consumes_rows_across_chunked_calls():
    model = build_tiny_moe("olmoe")
    ids = sample_ids(batch=4)
    with torch.no_grad(), RouteRecorder(model) as old:
        model(ids)
    perturb_routers(model)
    with torch.no_grad():
        with RoutingReplay(model, old.routes()):
            whole = model(ids).logits
        with RoutingReplay(model, old.routes()):
            chunks = torch.cat([model(ids[:1]).logits, model(ids[1:]).logits])
        with pytest.raises(ValueError, match="unused rows"), RoutingReplay(model, old.routes()):
            model(ids)
            model(ids[:1])  # the routes are used up
    torch.testing.assert_close(chunks, whole, atol=1e-6, rtol=0)


@pytest.mark.parametrize("use_reentrant", [True, False])
def test_closing_replay_before_a_checkpointed_backward_raises_instead_of_wrong_gradients(use_reentrant):
    model = build_tiny_moe("qwen3_moe")
    ids = sample_ids()
    with torch.no_grad(), RouteRecorder(model) as old:
        model(ids)
    model.train()
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": use_reentrant})
    with RoutingReplay(model, old.routes()):
        loss = -token_logps(model, ids).mean()
    with pytest.raises(RuntimeError, match="Keep backward"):
        loss.backward()
    model(ids)  # a later plain forward drops the guard: checkpointed training without replay works again
    (-token_logps(model, ids).mean()).backward()


def test_refusals_name_the_unsupported_part_and_the_fix():
    from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeTopKRouter

    from gspo_recipes.builtin.tiny import build_model, build_tokenizer

    with pytest.raises(ValueError, match="no transformers MoE layer.*routing_replay=False"):
        check_routing_replay_supported(build_model(build_tokenizer()))

    class CustomRouter(Qwen3MoeTopKRouter):  # same call signature, but its weight rule is not known to be covered
        pass

    model = build_tiny_moe("qwen3_moe")
    block = model.model.layers[1].mlp
    custom = CustomRouter(model.config)
    custom.load_state_dict(block.gate.state_dict())
    block.gate = custom
    with pytest.raises(
        ValueError, match="unknown router class CustomRouter in model.layers.1.mlp.*routing_replay=False"
    ):
        RoutingReplay(model, torch.zeros(1, 4, 2, 2, dtype=torch.long))

    model = build_tiny_moe("gpt_oss")
    block = model.model.layers[0].mlp
    block.kernel_layer_name = "MegaBlocksMoeMLP"
    block.forward = types.MethodType(lambda self, hidden: (hidden, None), block)  # what kernelize() does
    with pytest.raises(ValueError, match="hub kernel \\(MegaBlocksMoeMLP\\).*use_kernels=False"):
        check_routing_replay_supported(model)

    model = build_tiny_moe("qwen2_moe")
    model.config._experts_implementation = "my_kernel"  # registered by a user: its use of the routes is unknown
    with pytest.raises(ValueError, match="experts implementation 'my_kernel'.*set_experts_implementation"):
        check_routing_replay_supported(model)

    model = build_tiny_moe("mixtral", router_jitter_noise=0.1)
    with pytest.raises(ValueError, match="router_jitter_noise=0"):
        check_routing_replay_supported(model)

    with pytest.raises(ValueError, match="moe_layers=2"):
        RoutingReplay(build_tiny_moe("olmoe"), torch.zeros(1, 4, 3, 2, dtype=torch.long))


def test_is_moe_model_tells_dense_from_moe():
    from gspo_recipes.builtin.tiny import build_model, build_tokenizer

    assert not is_moe_model(build_model(build_tokenizer()))
    assert all(is_moe_model(build_tiny_moe(family)) for family in ("qwen2_moe", "glm4_moe"))


def test_routing_change_counts_changed_sets_and_slots_over_masked_tokens():
    old = torch.tensor(
        [[[[1, 2], [0, 3]], [[4, 5], [6, 7]], [[0, 1], [0, 1]]]]
    )  # (1 response, 3 tokens, 2 layers, k=2)
    new = torch.tensor([[[[2, 1], [0, 4]], [[6, 7], [6, 7]], [[2, 3], [2, 3]]]])
    # token 0: layer 0 same set (order differs), layer 1 one slot changed; token 1: layer 0 both slots changed;
    # token 2 is masked out (its changes must not count).
    change = routing_change(old, new, torch.tensor([[1, 1, 0]]))
    assert change["changed_sets"] == 2 and change["num_sets"] == 4
    assert change["changed_frac"] == 0.5
    assert change["changed_slots"] == 3 and change["changed_slot_frac"] == 3 / 8
    assert change["changed_frac_per_layer"] == [0.5, 0.5]
    assert routing_change(old, old, torch.ones(1, 3))["changed_frac"] == 0.0
    assert routing_change(old, new, torch.zeros(1, 3))["changed_slot_frac"] == 0.0
    with pytest.raises(ValueError, match="token_mask"):
        routing_change(old, new, torch.ones(1, 4))


def test_completion_routes_align_with_the_positions_that_predict_completion_tokens():
    routes = torch.arange(6).view(1, 6, 1, 1).expand(2, 6, 3, 2)  # position p routes to expert p
    selected = completion_routes(routes, num_completion_tokens=2)  # sequence = 4 prompt + 2 completion tokens
    assert selected.shape == (2, 2, 3, 2)
    assert selected[0, :, 0, 0].tolist() == [3, 4]  # last prompt token predicts completion token 0
    per_response = split_routes_per_response(routes)
    assert len(per_response) == 2 and torch.equal(stack_routes(per_response[::-1]), routes.flip(0))
