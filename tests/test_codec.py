from __future__ import annotations

import json

import msgpack
import pytest

from mqlab.codec import Codec
from mqlab.config.sizes import BUILTIN, SizeSampler, parse_size

SETTINGS = [("json", True), ("json", False), ("msgpack", True), ("msgpack", False)]


@pytest.mark.parametrize(("serializer", "envelope"), SETTINGS)
def test_every_setting_round_trips_every_size_the_distributions_draw(
    serializer: str, envelope: bool
) -> None:
    codec = Codec(serializer, envelope)
    sizes = set()
    for spec in ("openstack", "1..64", 1, 65536, [[100, 1], [200000, 1]]):
        sampler = SizeSampler(parse_size(spec), seed=7)
        sizes.update(sampler.next() for _ in range(200))
    for i, size in enumerate(sorted(sizes)):
        body = codec.encode(7, i, 123456789, size)
        assert codec.decode(body) == (7, i, 123456789)
        # about the size asked for (header digits vary), never less than the header
        assert len(body) <= max(size, len(codec.encode(7, i, 123456789, 1))) + 8
        if size > 200:
            assert len(body) >= size - 32
        assert codec.decode(codec.reply(7, i, 5)) == (7, i, 5)


def test_envelope_is_oslo_shaped_double_serialisation() -> None:
    body = Codec("json", True).encode(1, 2, 3, 200)
    outer = json.loads(body)
    assert outer["oslo.version"] == "2.0"
    assert isinstance(outer["oslo.message"], str)
    assert json.loads(outer["oslo.message"])["s"] == 2
    packed = msgpack.unpackb(Codec("msgpack", True).encode(1, 2, 3, 200))
    assert isinstance(packed["oslo.message"], bytes)


def test_one_drivers_message_decodes_in_another_process_codec() -> None:
    # every worker builds its own Codec: a message encoded by one must decode in another
    for ser, env in SETTINGS:
        assert Codec(ser, env).decode(Codec(ser, env).encode(3, 4, 5, 3000)) == (3, 4, 5)


def test_openstack_distribution_matches_the_recorded_sample() -> None:
    sampler = SizeSampler(parse_size("openstack"), seed=1)
    draws = sorted(sampler.next() for _ in range(20000))
    median = draws[len(draws) // 2]
    assert 2000 <= median <= 2700  # the sample's median is 2,450
    assert draws[0] >= 500 and draws[-1] <= 11499
    assert sum(w for _, _, w in BUILTIN["openstack"]) == 4077


@pytest.mark.parametrize("bad", [0, -5, "x..y", "9..3", True, [], [[1]], "huge"])
def test_bad_sizes_are_refused(bad: object) -> None:
    with pytest.raises(ValueError):
        parse_size(bad)


@pytest.mark.parametrize(("serializer", "envelope"), SETTINGS)
def test_a_clients_encoder_sends_the_same_bytes_as_encode(serializer: str, envelope: bool) -> None:
    # the per-client fast path must not change what goes on the wire
    codec = Codec(serializer, envelope)
    ints = (0, 1, 127, 128, 255, 256, 65535, 65536, 2**32 - 1, 2**32, 2**62, 2**64 - 1)
    for client in (0, 5, 300, 70000):
        encode = codec.encoder(client)
        for size in (1, 40, 64, 64, 200, 70000, 64):
            for seq, ts in zip(ints, reversed(ints), strict=True):
                assert encode(seq, ts, size) == codec.encode(client, seq, ts, size)


def test_a_msgpack_message_is_the_map_any_msgpack_reader_sees() -> None:
    # fixed-width numbers are still the four-key map, to any other msgpack reader
    codec = Codec("msgpack", False)
    body = codec.encoder(9)(12, 2**40, 64)
    assert msgpack.unpackb(body) == {"c": 9, "s": 12, "t": 2**40, "p": "x" * (64 - 37)}
    assert len(body) == 64  # the size asked for, to the byte
    # and a map packed the usual way (smallest widths, another key order) decodes too
    for other in ({"c": 9, "s": 12, "t": 5, "p": "xx"}, {"p": "", "t": 5, "s": 12, "c": 9}):
        assert codec.decode(msgpack.packb(other)) == (9, 12, 5)
