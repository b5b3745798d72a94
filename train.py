"""Train the GLANCE block head on the frozen target's own generations (issue 4: not built yet)."""

import sys

if __name__ == "__main__":
  sys.exit("train.py: head training is not implemented yet (tracked in issue 4); see README 'Status'.")
