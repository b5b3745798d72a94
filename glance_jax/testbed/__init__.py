"""A CPU testbed: a synthetic task suite, a small Qwen3-VL target trained on it and a GLANCE head.

suite.py (the rendered tasks, v1: the first testbed), suite_v2.py (v2, issue 14: uncertain
fields in every task), suite_v3.py / suite_v4.py (v2 with a caption uncertain over consecutive
tokens; v4, longer, is the shipped testbed), suites.py (versions and the suite.json marker), target_train.py (the
target's training), evaluate.py (held-out accuracy), probe.py (where the target is unsure),
build.py (one command rebuilds everything), paths.py (where the shipped copy lives).
"""
