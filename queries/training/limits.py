"""Every size a `training` spec controls, bounded in one place (docs/training.md, "Limits").

The model's parameter count is computed from its dimensions (`Model.n_params`, plain integer arithmetic on
bounded integers) and checked against `MAX_MODEL_PARAMS` before any weight vector, name list or optimiser
state is allocated. The limits are constants, not settings: a device enforces the same ones on the task it
receives, so a spec the server accepts is one every device accepts.

`MAX_MODEL_PARAMS` sizes everything that scales with the model. The weights travel as JSON: in the stored
state (weights, optimiser state, best weights) and in every round's task, which the server serialises once
per device check-in on its event loop. At 100,000 weights one task is ≈ 2.2 MB of JSON (≈ 40 ms to
serialise); at 1,000,000 it was 22 MB and 0.4 s per device, which would stall the server for every device
of every round — hence the cap. Each device's secure-aggregation vector has at most `MAX_MODEL_PARAMS + 1`
entries.
"""

from __future__ import annotations

MAX_MODEL_PARAMS = 100_000
"""Most weights a model may have (e.g. mlp: n_features·hidden + hidden + hidden·n_classes + n_classes)."""
MAX_FEATURES = 100_000
"""Largest `model.n_features` and longest `features` list."""
MAX_CLASSES = 10_000
"""Largest `model.n_classes`."""
MAX_HIDDEN = 10_000
"""Largest `model.hidden` (mlp)."""
MAX_ROUNDS = 100_000
"""Most training rounds (evaluation and label-count rounds come on top, see `rounds_upper_bound`)."""
MAX_EVAL_EVERY = MAX_ROUNDS
"""Largest `eval_every` (and `patience`): more than the rounds means "only before and after"."""
MAX_CLIENTS = 1_000_000
"""Largest `clients_per_round` (the same cap as `cohort.max_clients`)."""
MAX_NAME_CHARS = 128
"""Longest model, feature or weight name."""
MAX_SAFEGUARD_GROUPS = 10_000
"""Most `safeguards.ordered_groups`."""
MAX_SEED = 2**63 - 1
"""Largest `model.seed`."""
MAX_EPOCHS = 100
MAX_BATCH_SIZE = 100_000
MAX_EXAMPLES = 1_000_000
"""Largest `client.max_examples` (examples a device trains on per round)."""
MIN_CLIP_NORM = 1e-9
"""Smallest `clip_norm`: a device scales its clipped update by 2^precision_bits / clip_norm, which overflows for a
clip norm near the smallest floats (and no update is meaningfully that small)."""
MIN_SHARE = 0.01
"""Smallest `weight_share` and `adaptive_clipping.count_share`: an entry at a scale s of the update's carries 1/s
times its noise (100× at 1 %); far smaller scales round the entry away (a weight sum of 0 divides the update by 0)."""
MAX_L2 = 1e6
"""Largest `model.l2`: a larger penalty only overflows the loss (the weights stay at 0)."""
