"""What encoding and decoding cost on this machine, per codec setting a profile uses.

Recorded with every run so a reader can tell codec cost from driver cost.
Bounded: each setting encodes at most :data:`BUDGET_BYTES` per round (and at
least a few messages), so large messages cost a second, not minutes.
"""

from __future__ import annotations

from mqlab.codec import Codec, cost_us
from mqlab.config.profile import Profile
from mqlab.config.sizes import SizeSampler

SAMPLES = 2000
#: bytes encoded per round and setting; large messages get fewer samples
BUDGET_BYTES = 16 * 1024 * 1024
MIN_SAMPLES = 3


def codec_costs(profile: Profile) -> dict[str, float]:
    """Encode + decode microseconds per message for each codec setting the profile uses."""
    out: dict[str, float] = {}
    for sc in profile.scenarios:
        key = codec_key(sc.serializer, sc.envelope, sc.message_size.text)
        if key not in out:
            sampler = SizeSampler(sc.message_size, seed=1)
            sizes = [sampler.next() for _ in range(SAMPLES)]
            mean = sum(sizes) / len(sizes)
            sizes = sizes[: max(MIN_SAMPLES, min(SAMPLES, int(BUDGET_BYTES / mean)))]
            out[key] = round(cost_us(Codec(sc.serializer, sc.envelope), sizes), 2)
    return out


def codec_key(serializer: str, envelope: bool, size: str) -> str:
    return f"{serializer}{'+envelope' if envelope else ''} {size}"
