"""Trains the testbed's small Qwen3-VL target on the synthetic suite, on a CPU, from scratch.

Every parameter trains (vision tower included): next-token cross-entropy on the answer tokens of
chat-formatted prompts (`<|im_start|>user ... <|vision_start|><|image_pad|>x16<|vision_end|>question
<|im_end|>\\n<|im_start|>assistant\\n answer <|im_end|>`), exactly the format decoding feeds it. The
data are rendered on the fly (a pure function of the step), each batch holding an equal share of
every task, so there is no epoch and no data file; a background thread renders the next batch while
XLA runs the current step. State (params + Adam moments + step) is written atomically every
`save_every` steps and a restart resumes from it, reproducing the same batches.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import pathlib
import queue
import shutil
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from glance_jax.config import Qwen3VLConfig, tiny_config
from glance_jax.testbed import suites
from glance_jax.train.batch import Example, TrainBatch, collate

logger = logging.getLogger(__name__)

MIN_PIXELS, MAX_PIXELS = 64 * 64, 192 * 192  # the processor's area bounds: no suite image is resized


def testbed_config() -> Qwen3VLConfig:
  """~3.6M parameters: 4 decoder layers of width 192 (tied embeddings, 512-token vocab) and a
  3-block vision tower of width 128 with one deepstack merger."""
  return tiny_config(vocab_size=512, hidden=192, layers=4, heads=6, kv_heads=2, head_dim=32,
                     intermediate=512, vision_depth=3, vision_hidden=128, vision_heads=4,
                     vision_intermediate=256, num_position_embeddings=64, deepstack=(1,), tie=True)


@dataclasses.dataclass(frozen=True)
class TargetTrainConfig:
  steps: int = 5200
  batch_size: int = 16           # split evenly over the suite's tasks
  seq_len: int = 88
  lr: float = 2e-3
  warmup: int = 100
  weight_decay: float = 0.01
  seed: int = 0
  save_every: int = 200
  # whose train stream (train_record) the batches read. The defaults above fit v4's short answers
  # (seq_len 88); a build replaces them with its suite's TARGET_TRAIN (v5's: seq_len 256).
  suite_version: str = "v4"
  # A second schedule from step `restart_at` (0: none): warm-up to `restart_lr` and a cosine decay
  # to `steps`, the first one then decaying over restart_at steps (a continuation on a changed
  # stream moves little at the first schedule's late learning rate, 5% of the peak).
  restart_at: int = 0
  restart_lr: float = 1e-3
  # An HF target directory to start from (its weights, config and tokenizer) instead of random
  # weights and a tokenizer trained on the suite: a continuation on another suite's stream.
  init_from: str = ""


def suite_corpus(per_task: int = 400, version: str = suites.DEFAULT) -> list[str]:
  """Text the tokenizer is trained on: every question and `per_task` train answers of each task."""
  s = suites.get(version)
  lines = [q + "\n" for q in s.QUESTIONS.values()]
  for task in s.TASKS:
    for i in range(per_task):
      lines.append(s.render(task, "train", i)[2] + "\n")
  return lines


class ExampleMaker:
  """(image, question, answer) -> a training Example: the chat prompt + answer + <|im_end|>."""

  def __init__(self, processor, eos_id: int):
    self.processor = processor
    self.eos_id = eos_id
    self._prompt_ids: dict[str, np.ndarray] = {}

  def prompt_ids(self, question: str, image) -> np.ndarray:
    # Every suite image has the same size, so a question's prompt ids never change: cache them.
    if question not in self._prompt_ids:
      from glance_jax.qwen3_vl.inputs import prepare_inputs
      inp = prepare_inputs(self.processor, question, [image])
      self._prompt_ids[question] = np.asarray(inp.input_ids[0, : inp.lengths[0]])
    return self._prompt_ids[question]

  def __call__(self, image, question: str, answer: str, example_id: str | None = None) -> Example:
    prompt = self.prompt_ids(question, image)
    response = np.asarray(self.processor.tokenizer.encode(answer) + [self.eos_id], np.int32)
    ids = np.concatenate([prompt, response]).astype(np.int32)
    loss = np.zeros(ids.shape, bool)
    loss[prompt.size:] = True
    pixels, grid = self.processor.image_processor([image])
    return Example(input_ids=ids, loss_mask=loss, pixel_values=pixels, image_grid_thw=grid,
                   example_id=example_id)


def make_batch(step: int, cfg: TargetTrainConfig, maker: ExampleMaker, model_cfg: Qwen3VLConfig) -> TrainBatch:
  """Step `step`'s batch: per task, train records step * per_task + j of the suite's train stream
  (which keeps held-out scenes out itself: glance_jax/testbed/stream.py)."""
  s = suites.get(cfg.suite_version)
  per_task = cfg.batch_size // len(s.TASKS)
  examples = []
  for task in s.TASKS:
    for j in range(per_task):
      examples.append(maker(*s.train_record(task, step * per_task + j)))
  patches = sum(int(np.prod(e.image_grid_thw)) for e in examples)
  return collate(examples, model_cfg, seq_len=cfg.seq_len, max_patches=patches,
                 pad_id=maker.processor.pad_token_id)


def loss_fn(model, batch: TrainBatch):
  """Mean next-token CE over answer tokens; also the token accuracy. Shapes: ids [B,S]."""
  h, _, _ = model.forward_prompt(batch.prompt)                      # a throwaway S-slot cache
  logits = model.logits(h[:, :-1])                                   # [B, S-1, V]
  labels, mask = batch.input_ids[:, 1:], batch.loss_mask[:, 1:]
  ce = optax.softmax_cross_entropy_with_integer_labels(logits, labels)
  n = jnp.maximum(mask.sum(), 1)
  acc = ((jnp.argmax(logits, -1) == labels) & mask).sum() / n
  return (ce * mask).sum() / n, acc


def learning_rate(cfg: TargetTrainConfig) -> optax.Schedule:
  """Warm-up and cosine decay to 5% of the peak over `steps` (or over restart_at steps, then a
  second warm-up and decay from restart_lr to `steps`)."""
  if not 0 <= cfg.restart_at < cfg.steps:
    raise ValueError(f"TargetTrainConfig.restart_at {cfg.restart_at} must be in [0, steps={cfg.steps})")

  def phase(peak: float, length: int) -> optax.Schedule:
    return optax.warmup_cosine_decay_schedule(0.0, peak, min(cfg.warmup, max(1, length // 10)), length, peak * 0.05)
  if not cfg.restart_at:
    return phase(cfg.lr, cfg.steps)
  return optax.join_schedules([phase(cfg.lr, cfg.restart_at), phase(cfg.restart_lr, cfg.steps - cfg.restart_at)],
                              [cfg.restart_at])


def make_optimizer(cfg: TargetTrainConfig) -> optax.GradientTransformation:
  return optax.chain(optax.clip_by_global_norm(1.0),
                     optax.adamw(learning_rate(cfg), b1=0.9, b2=0.98, weight_decay=cfg.weight_decay))


@functools.lru_cache(maxsize=4)
def compiled_step(graphdef, cfg: TargetTrainConfig):
  """(optimizer, jitted step) per (architecture, config): a resumed run in the same process (the
  tests' crash-and-resume) reuses the compiled step instead of recompiling a new closure."""
  tx = make_optimizer(cfg)
  return tx, make_step(graphdef, tx)


def make_step(graphdef, tx):
  @jax.jit
  def step(params, opt_state, batch):
    def f(p):
      return loss_fn(nnx.merge(graphdef, p), batch)
    (loss, acc), grads = jax.value_and_grad(f, has_aux=True)(params)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, {"loss": loss, "acc": acc}
  return step


# --- resumable state: one npz of every leaf, written atomically ----------------------------------

def save_state(path: pathlib.Path, step: int, params, opt_state) -> None:
  leaves = jax.tree.leaves((params, opt_state))
  tmp = path.with_suffix(".tmp.npz")
  np.savez(tmp, step=np.int64(step), **{f"leaf_{i}": np.asarray(x) for i, x in enumerate(leaves)})
  os.replace(tmp, path)


def load_state(path: pathlib.Path, params, opt_state):
  """-> (step, params, opt_state) from `path`, or None if absent; a torn or mismatched file raises
  naming the file and the leaf, since silently restarting would lose the run."""
  if not path.exists():
    return None
  like, treedef = jax.tree.flatten((params, opt_state))
  try:
    with np.load(path) as z:
      step = int(z["step"])
      leaves = [z[f"leaf_{i}"] for i in range(len(like))]
  except Exception as e:  # noqa: BLE001 - any unreadable state file is one clear error
    raise ValueError(f"{path}: unreadable training state ({type(e).__name__}: {e}); delete it to "
                     f"start over") from None
  for i, (a, b) in enumerate(zip(leaves, like)):
    if a.shape != b.shape:
      raise ValueError(f"{path}: leaf {i} has shape {a.shape}, the model needs {b.shape}")
  params, opt_state = jax.tree.unflatten(treedef, [jnp.asarray(x) for x in leaves])
  return step, params, opt_state


def _check_tokenizer(used: pathlib.Path, kept: pathlib.Path) -> None:
  """Keeps a copy of the run's tokenizer beside its state; a different one in the output is an error
  (its ids would not be the ones the state's embeddings were trained on)."""
  if not kept.exists():
    shutil.copyfile(used, kept)
  elif kept.read_bytes() != used.read_bytes():
    raise ValueError(f"{used}: not the tokenizer this run's state was trained with ({kept}); restore "
                     f"it from there, or delete {kept.parent / 'target_state.npz'} and {kept} to start over")


def _truncate_metrics(path: pathlib.Path, last_step: int) -> None:
  if not path.exists():
    return
  keep = [line for line in path.read_text().splitlines() if line and json.loads(line)["step"] <= last_step]
  path.write_text("".join(line + "\n" for line in keep))


class _Prefetch:
  """Renders batches for steps start.. in a background thread (PIL and numpy release the GIL
  often enough to overlap XLA's step)."""

  def __init__(self, make, start: int, stop: int, depth: int = 2):
    self.q: queue.Queue = queue.Queue(depth)
    self.thread = threading.Thread(target=self._run, args=(make, start, stop), daemon=True)
    self.thread.start()

  def _run(self, make, start, stop):
    try:
      for s in range(start, stop):
        self.q.put((s, make(s)))
    except BaseException as e:  # noqa: BLE001 - re-raised in the training thread by get()
      self.q.put((None, e))

  def get(self):
    s, item = self.q.get()
    if s is None:
      raise item
    return s, item


_SIDE_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
               "preprocessor_config.json")


def _start_from(init: pathlib.Path, out: pathlib.Path):
  """The target at `init` (fp32) for a continuation; its side files (config, tokenizer, template,
  preprocessor) are copied into `out`, so the run keeps its token ids."""
  from glance_jax.qwen3_vl.target import load_target
  if not (init / "config.json").is_file() or not (init / "tokenizer.json").is_file():
    raise ValueError(f"TargetTrainConfig.init_from {init}: not a target directory (config.json and "
                     f"tokenizer.json expected)")
  out.mkdir(parents=True, exist_ok=True)
  for name in _SIDE_FILES:
    if (init / name).is_file() and not (out / name).exists():
      shutil.copyfile(init / name, out / name)
  return load_target(init, dtype=jnp.float32)


def train_target(out_dir: str | os.PathLike, workdir: str | os.PathLike, cfg: TargetTrainConfig = TargetTrainConfig(),
                 *, log_every: int = 50, save_dtype=None, model_cfg: Qwen3VLConfig | None = None,
                 batches=None) -> pathlib.Path:
  """Trains the target; writes the HF checkpoint directory `out_dir` (tokenizer first, weights at the
  end, cast to `save_dtype` if given) and keeps the resumable state + metrics in `workdir`.
  `model_cfg` (tests only) replaces the testbed's architecture. `batches(processor, model_cfg)` ->
  step -> TrainBatch replaces the suite's stream (the two-model draft trains on regenerated rows:
  testbed/draft_train.py). Returns out_dir."""
  from glance_jax.io import save_tensors
  from glance_jax.qwen3_vl.inputs import Processor
  from glance_jax.qwen3_vl.target import Target
  from glance_jax.qwen3_vl.weights import state_tensors
  from glance_jax.testing.checkpoint import write_checkpoint

  out, work = pathlib.Path(out_dir), pathlib.Path(workdir)
  work.mkdir(parents=True, exist_ok=True)
  kept = work / "tokenizer.json"     # the tokenizer the resumable state was trained with
  if cfg.init_from:
    target = _start_from(pathlib.Path(cfg.init_from), out)
    model_cfg = target.config
  else:
    model_cfg = model_cfg or testbed_config()
    target = Target.random(model_cfg, seed=cfg.seed)
  if not (out / "tokenizer.json").exists():
    # The side files (config, tokenizer trained on the suite, preprocessor) come first: the
    # processor that builds the training prompts is the one decoding will load.
    write_checkpoint(out, model_cfg, target.params, tokenizer_corpus=suite_corpus(version=cfg.suite_version),
                     min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS)
    if kept.exists():
      # a resumed run whose output went missing: a tokenizer retrained now (on a suite that may
      # have changed since) would renumber the ids the restored weights were trained on
      shutil.copyfile(kept, out / "tokenizer.json")
  _check_tokenizer(out / "tokenizer.json", kept)
  processor = Processor.from_pretrained(str(out))
  maker = ExampleMaker(processor, model_cfg.eos_token_ids[0])

  tx, step_fn = compiled_step(target.graphdef, cfg)
  params = target.params
  opt_state = tx.init(params)
  state_path = work / "target_state.npz"
  start = 0
  restored = load_state(state_path, params, opt_state)
  if restored is not None:
    start, params, opt_state = restored
    logger.info("resuming target training at step %d from %s", start, state_path)
  batch_of = batches(processor, model_cfg) if batches else (lambda s: make_batch(s, cfg, maker, model_cfg))
  prefetch = _Prefetch(batch_of, start, cfg.steps)
  metrics_path = work / "target_metrics.jsonl"
  _truncate_metrics(metrics_path, start)  # steps after the restored state are logged again
  t0, done = time.perf_counter(), start
  for _ in range(start, cfg.steps):
    s, batch = prefetch.get()
    params, opt_state, m = step_fn(params, opt_state, batch)
    done = s + 1
    if done % log_every == 0 or done == cfg.steps:
      m = {k: float(v) for k, v in m.items()}
      rate = (done - start) / (time.perf_counter() - t0)
      logger.info("target step %d/%d loss %.4f acc %.3f (%.2f steps/s)", done, cfg.steps, m["loss"],
                  m["acc"], rate)
      with open(metrics_path, "a") as f:
        f.write(json.dumps({"step": done, **m}) + "\n")
    if done % cfg.save_every == 0 and done < cfg.steps:
      save_state(state_path, done, params, opt_state)
  save_tensors(out, state_tensors(params, save_dtype))
  save_state(state_path, done, params, opt_state)
  return out
