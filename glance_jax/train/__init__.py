"""Training the block-diffusion draft head on a frozen Qwen3-VL target (DFlash / SpecForge recipe).

  batch.py      TrainBatch (fixed shapes, right-padded), `collate` from per-example numpy, and
                FeatureCache (target features on disk for small runs)
  objective.py  random anchors, the packed block mask, online target features, the decayed block CE
  optim.py      AdamW + linear warmup + cosine (SpecForge defaults) on fp32 master weights
  step.py       TrainState, born-sharded `init_train_state`, the jitted, donating `make_train_step`

Import the modules directly (`from glance_jax.train import step`); this file imports nothing, so
`import glance_jax.train` stays free.
"""
