"""The decode library: one jitted loop of rounds for every method.

  generate(target, inputs, head=, method=, budget=, ...) -> GenerationResult     generate.py
  methods.plan(target, method, head=, budget=) -> Plan (drafter + width policy)   methods.py
  Drafter, Proposal, Prefill: the drafter interface                              drafter.py
  drafters/: ar, ngram, block (glance, chain)
  policies/: Fixed, Holding, Auto (glance-auto), NgramGate; round-cost tables
  loop.py: prefill, decode_rounds (the engine); verify.py: tree, walk, commit; tree.py: top-N builder
"""
