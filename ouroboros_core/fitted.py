"""Numbers the Ouroboros drafter takes from measurement, named once, with where each was measured.

They steer how far the draft goes and which branches are verified, never what the target accepts: a
wrong one costs speed, not correctness. The figures behind them are in docs/BENCHMARKS.md, under the
section each line names. The draft's sharpening (DRAFT_SHARPEN) lives beside the sampling it
changes, in sampling.py.
"""

# trunk.guess_chances: the chance that the target's sample is the draft's k-th keyed guess is
# RANK_SHARE * softmax(keyed / spread)[k] over its GUESSES_SCORED best keyed scores, with
# spread = CHANCE_SPREAD * (SPREAD_AT / temperature) ** SPREAD_POWER in keyed units.
# Fitted on the embedded pair's distilled draft (docs/BENCHMARKS.md, "Sampled: fitted chances"); a
# refit to the draft trained longer ran slower (docs/BENCHMARKS.md, "Sampled: rows where they
# stand").
RANK_SHARE = 0.97
GUESSES_SCORED = 8
CHANCE_SPREAD = 0.95
SPREAD_AT = 0.8
SPREAD_POWER = 0.9

# The draft's choices after its first that may stand in for it as branches (docs/BENCHMARKS.md,
# "Sampled: rows where they stand").
ALTERNATIVES = 3

# Sampled, the draft goes on while its trunk's chance is above extend_chance times the tokens a step
# committed lately: a moving average that starts at RECENT_TOKENS_START and weighs the figure so far
# and the latest step by RECENT_WEIGHTS. Set with extend_chance (docs/BENCHMARKS.md, "Sampled:
# fitted chances").
RECENT_TOKENS_START = 3.0
RECENT_WEIGHTS = (0.8, 0.2)

# proposal.LookupTrust's (kept, reached) pseudo-counts at every depth: a copy or a pool phrase is
# trusted at 80% a token until the request's verdicts say otherwise (a prior of 50% measured in
# docs/BENCHMARKS.md, "Sampled: rows left out"; how far copies stand by their matched length:
# docs/BENCHMARKS.md, "Sampled: rows where they stand").
TRUST_PRIOR = (1.0, 1.25)

# lookup.StoredLookup ends its walk before the first token whose chance of standing is at most this:
# a row pays where its token stands often enough to repay what the row adds to a target forward
# (docs/BENCHMARKS.md, *The constants behind the code*).
STORED_ABOVE = 0.12
