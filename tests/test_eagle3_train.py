"""EAGLE-3's training-time test (train/eagle3_objective.py): each unrolled step is the decode-time
draft chain, the target distribution is renormalised over the draft vocabulary, and it learns."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from glance_jax.eagle3 import Eagle3Cache, Eagle3Config, causal_mask, init_eagle3, vocab_map_from_counts
from glance_jax.train import eagle3_objective as obj
from glance_jax.train.batch import TrainBatch

CFG = Eagle3Config(hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2,
                   head_dim=16, vocab_size=300, draft_vocab_size=100, rope_theta=5e6,
                   mrope_section=(4, 2, 2), aux_layer_ids=(1, 3, 5))
S, STEPS = 12, 4


def _batch(seed: int, b: int = 2, real: tuple[int, ...] = (12, 9), prompt: int = 3) -> TrainBatch:
  rng = np.random.default_rng(seed)
  ids = rng.integers(0, CFG.vocab_size, (b, S)).astype(np.int32)
  valid = np.arange(S)[None] < np.asarray(real)[:, None]
  loss = valid & (np.arange(S)[None] >= prompt)
  pos = np.where(valid, np.arange(S)[None], 0).astype(np.int32)
  # Rows 1-2 of the first sequence stand in for image rows: distinct 3-D positions.
  pos3 = np.broadcast_to(pos[None], (3, b, S)).copy()
  pos3[1, 0, 1:3], pos3[2, 0, 1:3] = 5, 7
  return TrainBatch(input_ids=jnp.asarray(np.where(valid, ids, 0)), loss_mask=jnp.asarray(loss),
                    attention_mask=jnp.asarray(valid), positions=jnp.asarray(pos3))


def _head(seed: int = 0):
  graphdef, params = init_eagle3(CFG, seed=seed)
  return nnx.merge(graphdef, params), graphdef, params


def test_each_unrolled_step_is_the_decode_time_chain():
  """Step k at row t == the head run as at decode time: a causal prefill over rows 0..t, then k
  single-row steps through its KV cache, each fed the previous step's h and the next token. Any
  leak between rows' steps (the bug class of draft trees attending wrong ancestors) breaks it."""
  head, _, _ = _head()
  rng = np.random.default_rng(1)
  embed = jnp.asarray(rng.normal(size=(CFG.vocab_size, CFG.hidden_size)), jnp.float32)
  feats = jnp.asarray(rng.normal(size=(2, S, 3 * CFG.hidden_size)), jnp.float32)
  batch = _batch(0)
  out = obj.unroll(head, embed, feats, batch, STEPS)
  ids, pos = np.asarray(batch.input_ids), np.asarray(batch.positions)
  for r, t in ((0, 4), (0, 7), (1, 2), (1, 5)):
    slots = S + STEPS
    cache = Eagle3Cache(k=(jnp.zeros((1, slots, 2, 16)),), v=(jnp.zeros((1, slots, 2, 16)),))
    g = head.project(feats[r:r + 1, :t + 1])
    tok = jnp.asarray(ids[r, 1:t + 2])[None]
    logits, h, cache = head(g, head.embed(tok, embed), jnp.asarray(pos[:, r:r + 1, :t + 1]), cache,
                            jnp.zeros((1,), jnp.int32), causal_mask(jnp.zeros((1,), jnp.int32), t + 1, slots))
    np.testing.assert_allclose(np.asarray(logits[0, t]), np.asarray(out[0][r, t]), atol=1e-4, rtol=1e-4)
    for k in range(1, STEPS):
      nxt = ids[r, t + 1 + k] if t + 1 + k < S else 0
      at = jnp.asarray([t + k], jnp.int32)
      p = jnp.asarray(pos[:, r, t] + k, jnp.int32).reshape(3, 1, 1)
      logits, h, cache = head(h[:, -1:], head.embed(jnp.asarray([[nxt]]), embed), p, cache, at,
                              causal_mask(at, 1, slots))
      np.testing.assert_allclose(np.asarray(logits[0, 0]), np.asarray(out[k][r, t]), atol=1e-4, rtol=1e-4,
                                 err_msg=f"row {r} t {t} step {k}")


def test_target_distribution_is_renormalised_over_the_draft_vocabulary():
  rng = np.random.default_rng(2)
  lm_head = rng.normal(size=(CFG.vocab_size, 8)).astype(np.float32)
  hidden = rng.normal(size=(2, 5, 8)).astype(np.float32)
  d2t, t2d = vocab_map_from_counts(rng.integers(0, 50, CFG.vocab_size), CFG.draft_vocab_size)
  used = np.arange(CFG.draft_vocab_size) + d2t
  full = np.asarray(jax.nn.softmax(jnp.asarray(hidden @ lm_head.T), axis=-1))
  want = full[..., used] / full[..., used].sum(-1, keepdims=True)
  got = obj.target_distribution(jnp.asarray(hidden), jnp.asarray(lm_head[used]))
  np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-7)


def test_supervised_rows_and_masks():
  """Step k supervises row t iff token t + 2 + k is a response token of the row and in the draft
  vocabulary; the TTT mask gives row t step 0's rows <= t and its own row of steps 1..k only."""
  batch = _batch(3)
  t2d = np.zeros(CFG.vocab_size, bool)
  t2d[::2] = True                                          # even target ids are draftable
  head, _, _ = _head()
  p = jnp.full((2, S, CFG.draft_vocab_size), 1.0 / CFG.draft_vocab_size)
  _, m = obj.ttt_loss(head, jnp.zeros((CFG.vocab_size, CFG.hidden_size)), jnp.zeros((2, S, 96)), p, batch,
                      jnp.asarray(t2d), steps=STEPS)
  ids, resp = np.asarray(batch.input_ids), np.asarray(batch.loss_mask)
  for k in range(STEPS):
    want = sum(int(resp[r, t + 2 + k] and t2d[ids[r, t + 2 + k]])
               for r in range(2) for t in range(S) if t + 2 + k < S)
    assert int(m[f"n_{k}"]) == want, k
  mask = np.asarray(obj.ttt_mask(batch.attention_mask, 2, STEPS))
  t = 5
  assert mask[0, t, :S].tolist() == [s <= t for s in range(S)]
  for j in range(1, STEPS):
    assert mask[0, t, j * S:(j + 1) * S].tolist() == [s == t and j <= 2 for s in range(S)]
  assert not mask[1, t, 9:S].any()                        # padding rows of the shorter sequence


def test_ttt_learns_a_fixed_batch():
  """A few Adam steps on one batch lower every step's loss (the gradient reaches fc, the midlayer
  and lm_head through all unrolled steps)."""
  _, graphdef, params = _head(4)
  rng = np.random.default_rng(5)
  embed = jnp.asarray(rng.normal(size=(CFG.vocab_size, CFG.hidden_size)), jnp.float32)
  feats = jnp.asarray(rng.normal(size=(2, S, 96)), jnp.float32)
  batch = _batch(6)
  p = jax.nn.softmax(jnp.asarray(3 * rng.normal(size=(2, S, CFG.draft_vocab_size)), jnp.float32), -1)
  t2d = jnp.ones((CFG.vocab_size,), bool)
  tx = optax.adam(3e-3)
  opt = tx.init(params)

  @jax.jit
  def step(params, opt):
    def f(q):
      return obj.ttt_loss(nnx.merge(graphdef, q), embed, feats, p, batch, t2d, steps=STEPS)
    (loss, m), g = jax.value_and_grad(f, has_aux=True)(params)
    up, opt = tx.update(g, opt, params)
    return optax.apply_updates(params, up), opt, m

  _, _, first = step(params, opt)
  for _ in range(60):
    params, opt, m = step(params, opt)
  for k in range(STEPS):
    assert float(m[f"loss_{k}"]) < 0.8 * float(first[f"loss_{k}"]), (k, first, m)
