"""A CPU testbed: a synthetic task suite, a small Qwen3-VL target trained on it and a GLANCE head.

suite.py (the rendered tasks, v1: the shipped testbed), suite_v2.py (v2, issue 14: uncertain
fields in every task), suites.py (versions and the suite.json marker), target_train.py (the
target's training), evaluate.py (held-out accuracy), probe.py (where the target is unsure),
build.py (one command rebuilds everything), paths.py (where the shipped copy lives).
"""
