"""A CPU testbed: a synthetic task suite, a small Qwen3-VL target trained on it and a GLANCE head.

suite.py (the rendered tasks), target_train.py (the target's training), evaluate.py (held-out
accuracy), build.py (one command rebuilds everything), paths.py (where the shipped copy lives).
"""
