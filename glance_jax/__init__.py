"""glance_jax: GLANCE lossless speculative decoding for vision-language models, in JAX/Flax.

Public API (the architecture in one screen):

  Target (Qwen3-VL, frozen)
    load_target(path_or_repo_id, dtype=..., mesh=None) -> Target
    Target.random(config) / Target.prefill / .decode / .forward_block / .generate_greedy
    Qwen3VLConfig, QWEN3_VL_8B, tiny_config

  Inputs
    Processor.from_pretrained(dir), prepare_inputs(processor, prompts, images) -> ModelInputs

  Sharding
    make_mesh(shape), DEFAULT_RULES

  Head (DFlash architecture) and decoding
    HeadConfig.for_target(cfg), init_head, load_head, save_head, Head (bound for decoding)
    generate(target, inputs, head=, method=ar|ngram|chain|glance, budget=N|"auto", ...) -> GenerationResult
    plan(target, method, head=, budget=) -> Plan: the method's drafter and width policy
    build_tree(log_q, num_nodes) -> Tree
"""

from glance_jax.config import QWEN3_VL_8B, Qwen3VLConfig, TextConfig, VisionConfig, tiny_config
from glance_jax.decode.generate import GenerationResult, generate
from glance_jax.decode.methods import Plan, plan
from glance_jax.decode.tree import Tree, build_tree, chain_tree
from glance_jax.head import Head, HeadConfig, init_head, load_head, save_head
from glance_jax.qwen3_vl.inputs import ModelInputs, Processor, prepare_inputs, prepare_inputs_from_ids
from glance_jax.qwen3_vl.target import InputError, Target, load_target
from glance_jax.sharding import DEFAULT_RULES, make_mesh

__all__ = [
    "QWEN3_VL_8B", "Qwen3VLConfig", "TextConfig", "VisionConfig", "tiny_config",
    "Tree", "build_tree", "chain_tree", "GenerationResult", "Plan", "generate", "plan",
    "Head",
    "HeadConfig", "init_head", "load_head", "save_head",
    "ModelInputs", "Processor", "prepare_inputs", "prepare_inputs_from_ids",
    "InputError", "Target", "load_target",
    "DEFAULT_RULES", "make_mesh",
]
