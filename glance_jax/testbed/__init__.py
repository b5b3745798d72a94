"""A CPU testbed: a synthetic task suite, a small Qwen3-VL target trained on it and a GLANCE head.

suite_v4.py (the shipped suite's tasks), stream.py (what every suite version shares: records, the
held-out rule, task files), suites.py (the versions and the suite.json marker), target_train.py (the
target's training), evaluate.py (held-out accuracy), probe.py (where the target is unsure), build.py
(one command rebuilds everything), paths.py (where the shipped copy lives), demo.py (`python decode.py`).
"""
