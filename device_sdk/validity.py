"""What the device masks, from the kind's vector x: without validation s·x plus its noise share
(device_sdk.noise); when its cohort validates inputs (`privacy.validation: "proofs"`, docs/validation.md) a noise
share e truncated at the round's bound B, the masked content s·x + e followed by the blinding limbs, and the
validity proof that goes with the masked input.

Without a `validation` block in the assignment this is the plain path: s·x plus the untruncated noise share
(device_sdk.noise). The device refuses a bound B below `MIN_BOUND_STDS` standard deviations of its own
noise share: truncating there would weaken the noise its privacy relies on.
"""

from __future__ import annotations

import numpy as np

from device_sdk.admission import ParsedAssignment
from device_sdk.noise import add_noise
from device_sdk.randomness import ContributionRandomness
from queries.dp import sample_noise_bounded
from queries.dp.noise import per_device_std
from secagg.validity import ProofContext, blind_limbs, prove

MIN_BOUND_STDS = 6.0
"""Smallest noise bound B the device accepts, in standard deviations of its noise share (a redraw rate of
about 2e-9 per entry; servers choose B from δ, typically 8–10 standard deviations)."""


def masked_content(
    parsed: ParsedAssignment, x: np.ndarray, draws: ContributionRandomness,
) -> tuple[np.ndarray, bytes | None]:
    """(the vector to mask, the validity proof or None) for the kind's vector `x`; the proof is bound to the device's
    own task digest (`parsed.digest`). ValueError when the device cannot take part."""
    a = parsed.assignment
    if a.validation is None:
        return add_noise(x, a.noise, draws.noise), None
    base = parsed.statement
    if base is None:
        raise ValueError(f"validation: {a.kind} has no validity statement for this task")
    noisy = a.noise is not None and a.noise.mechanism != "none"
    scale = int(a.noise.encoding_scale) if noisy and a.noise is not None else 1
    bound = int(a.validation.noise_bound) if noisy else 0
    noise = None
    if noisy and a.noise is not None:
        std = per_device_std(a.noise.mechanism, a.noise.scale)
        if bound < MIN_BOUND_STDS * std:
            raise ValueError(f"validation.noise_bound: {bound} is below {MIN_BOUND_STDS:g} standard deviations "
                             f"({std:.3g}) of this device's noise share; refusing to truncate the noise there")
        noise = sample_noise_bounded(a.noise.mechanism, a.noise.scale, len(x), draws.noise, bound)
    statement = base.with_noise(scale, bound)
    context = ProofContext(parsed.secagg.session_id, a.query_id, a.round, a.party_id, parsed.digest)
    proof, blind = prove(statement, context, x.tolist(), None if noise is None else noise.tolist(), draws.validity)
    content = x.astype(np.int64) * scale + (0 if noise is None else noise)
    return np.concatenate([content, np.asarray(blind_limbs(blind), dtype=np.int64)]), proof
