"""What encoding and decoding cost on this machine, per codec setting a profile uses.

Recorded with every run so a reader can tell codec cost from driver cost.
"""

from __future__ import annotations

from mqlab.codec import Codec, cost_us
from mqlab.profile import Profile
from mqlab.sizes import SizeSampler


def codec_costs(profile: Profile) -> dict[str, float]:
    """Encode + decode microseconds per message for each codec setting the profile uses."""
    out: dict[str, float] = {}
    for sc in profile.scenarios:
        key = codec_key(sc.serializer, sc.envelope, sc.message_size.text)
        if key not in out:
            sampler = SizeSampler(sc.message_size, seed=1)
            sizes = [sampler.next() for _ in range(2000)]
            out[key] = round(cost_us(Codec(sc.serializer, sc.envelope), sizes), 2)
    return out


def codec_key(serializer: str, envelope: bool, size: str) -> str:
    return f"{serializer}{'+envelope' if envelope else ''} {size}"
