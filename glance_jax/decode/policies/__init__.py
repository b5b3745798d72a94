"""Width policies (how many drafted nodes a round verifies) and the round-cost tables they read."""

from glance_jax.decode.policies.auto import PAUSE, Auto, best_width
from glance_jax.decode.policies.base import (Fixed, Holding, WidthPolicy, calibration_record,
                                             expected_accepted, smallest_width_holding)
from glance_jax.decode.policies.ngram_gate import (NgramGate, ngram_can_pay, ngram_pays_at_prior, ngram_prior,
                                                   ngram_update, ngram_width)
from glance_jax.decode.policies.round_cost import (AUTO_WIDTHS, COST_SCHEMA, DEFAULT_TABLE, DEFAULT_TABLES,
                                                   FORCE_COST, NGRAM_WIDTHS, RoundCost, auto_widths,
                                                   default_round_cost, ngram_widths, paying_widths,
                                                   read_round_cost)

__all__ = ["PAUSE", "AUTO_WIDTHS", "COST_SCHEMA", "DEFAULT_TABLE", "DEFAULT_TABLES", "FORCE_COST", "NGRAM_WIDTHS", "Auto", "Fixed", "Holding", "NgramGate", "RoundCost", "WidthPolicy", "auto_widths", "best_width",
           "calibration_record", "default_round_cost", "expected_accepted", "ngram_can_pay", "ngram_pays_at_prior",
           "ngram_prior", "ngram_update", "ngram_width", "ngram_widths", "paying_widths", "read_round_cost",
           "smallest_width_holding"]
