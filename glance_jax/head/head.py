"""`Head`: a block head bound for decoding (config, graphdef, params), as `Target` is for the target."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp
import numpy as np

from glance_jax.static_args import JitArgs

ABLATIONS = ("zero-context",)   # Head.ablated kinds (decode.py bench --ablate)


@dataclasses.dataclass(frozen=True, eq=False)
class Head(JitArgs):
  """`Head(*load_head(path))`, `Head.load(path, target=)` or `Head.random(target)`; its jit
  arguments are `jit_graphdef` and `flat_params` (static_args.JitArgs).

  token_counts: int64 [V], the training rows' response-token counts when they were found beside the
  checkpoint (head/draft_vocab.py); draft_vocab: a head/draft_vocab.DraftVocab the head drafts
  over instead of the whole vocabulary (Head.with_draft_vocab), or None. calibration: the
  head/tree_calibration.TreeCalibration found beside the checkpoint; scores: the one its trees
  rank prefixes by (Head.with_calibrated_scores), None = the product of marginals. correction: the
  head/parent_correction.Correction found beside the checkpoint; parent: the one its trees expand
  each node's own children with (Head.with_parent_correction; it takes the place of `scores`)."""
  config: Any
  graphdef: Any
  params: Any
  token_counts: Any = None
  draft_vocab: Any = None
  calibration: Any = None
  scores: Any = None
  correction: Any = None
  parent: Any = None

  @classmethod
  def load(cls, path_or_repo_id, *, target=None, dtype=None, mesh=None) -> "Head":
    """A DFlash-format head (directory or hub repo id), checked to fit `target` when given, in its
    dtype and on its mesh unless told otherwise."""
    import pathlib

    from glance_jax.head import draft_vocab as dv
    from glance_jax.head.checkpoint import load_head
    from glance_jax.io import resolve_checkpoint_dir
    cfg, graphdef, params = load_head(path_or_repo_id, dtype=dtype or (target.dtype if target else jnp.float32),
                                      mesh=mesh if mesh is not None else getattr(target, "mesh", None),
                                      target_config=target.config if target else None)
    root = resolve_checkpoint_dir(str(path_or_repo_id))
    counts = dv.load_counts(root, cfg.vocab_size) if (pathlib.Path(root) / dv.COUNTS_FILE).exists() else None
    from glance_jax.head import tree_calibration as tc
    calib = tc.load(root, cfg.block_size - 1) if (pathlib.Path(root) / tc.FILE).exists() else None
    from glance_jax.head import parent_correction as pc
    corr = pc.load(root) if pc.exists(root) else None
    if corr is not None:
      corr.check_head(cfg, where=str(pathlib.Path(root) / pc.FILE))
    return cls(cfg, graphdef, params, token_counts=counts, calibration=calib, correction=corr)

  @classmethod
  def random(cls, target, *, seed: int = 0, num_layers: int = 5, block_size: int = 16) -> "Head":
    from glance_jax.head.config import HeadConfig
    from glance_jax.head.init import init_head
    cfg = HeadConfig.for_target(target.config, num_layers=num_layers, block_size=block_size)
    return cls(cfg, *init_head(cfg, seed=seed, dtype=target.dtype, mesh=target.mesh))

  def ablated(self, kind: str) -> "Head":
    """The head under an ablation of ABLATIONS, sharing these params. "zero-context": the target's
    tapped features are zeroed before the head reads them (BlockHead.zero_context), so it drafts
    without the conditioning; decoding stays lossless (the target still verifies)."""
    if kind not in ABLATIONS:
      raise ValueError(f"unknown ablation {kind!r}; valid: {', '.join(ABLATIONS)}")
    from glance_jax.head.model import zero_context_graphdef
    return dataclasses.replace(self, graphdef=zero_context_graphdef(self.graphdef, self.params))

  def with_draft_vocab(self, target, size: int) -> "Head":
    """This head drafting over the `size` most frequent tokens of its token_counts (the target's
    lm_head rows gathered now, once); the same params."""
    from glance_jax.head import draft_vocab as dv
    if self.token_counts is None:
      raise ValueError(f"draft vocabulary of {size}: this head has no token counts ({dv.COUNTS_FILE} beside "
                       "its checkpoint; `python -m glance_jax.train.token_counts` writes them)")
    return dataclasses.replace(self, draft_vocab=dv.gather(target, dv.top_ids(self.token_counts, size)))

  def with_calibrated_scores(self, calibration=None) -> "Head":
    """This head with its trees ranked by calibrated node scores (`calibration`, default the one
    found beside its checkpoint; head/tree_calibration.py); the same params."""
    calibration = calibration if calibration is not None else self.calibration
    if calibration is None:
      from glance_jax.head import tree_calibration as tc
      raise ValueError(f"calibrated scores: this head has no {tc.FILE} beside its checkpoint (fit one with "
                       "`python -m glance_jax.bench.tree_calibration`)")
    if calibration.depth != self.config.block_size - 1:
      raise ValueError(f"calibrated scores: a table of depth {calibration.depth} for a head drafting "
                       f"{self.config.block_size - 1} tokens")
    return dataclasses.replace(self, calibration=calibration, scores=calibration)

  def with_parent_correction(self, correction=None) -> "Head":
    """This head with its trees built from each node's own children under a parent correction
    (`correction`, default the one found beside its checkpoint; head/parent_correction.py)."""
    correction = correction if correction is not None else self.correction
    if correction is None:
      from glance_jax.head import parent_correction as pc
      raise ValueError(f"parent correction: this head has no {pc.FILE} beside its checkpoint (train one with "
                       "`python train.py --config configs/train_parent_testbed.py`)")
    correction.check_head(self.config)
    return dataclasses.replace(self, correction=correction, parent=correction, scores=None)

  @property
  def draft_coverage(self) -> float | None:
    """Share of the training rows' response tokens inside the draft vocabulary (None: no vocabulary)."""
    from glance_jax.head import draft_vocab as dv
    if self.draft_vocab is None or self.token_counts is None:
      return None
    return dv.coverage(self.token_counts, np.asarray(self.draft_vocab.ids))
