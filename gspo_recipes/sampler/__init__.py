"""The sampler's log-probabilities: as the old policy (old_logps.py, generation_logprobs.py), compared with the
trainer's (mismatch.py), and vLLM's importance-sampling weight shaped for GSPO (vllm_is_weight.py)."""

from gspo_recipes.sampler.old_logps import SamplerLogprobs

__all__ = ["SamplerLogprobs"]
