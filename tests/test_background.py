"""Background stress with a probe: a steady open-loop load beside a measured step."""

from __future__ import annotations

from pathlib import Path

import pytest

from mqlab.config.profile import load_profile
from mqlab.errors import ProfileError

from .helpers import mqlab, results, write_profile

BASE = '[drivers.lb]\nplugin = "loopback"\n[[scenario]]\npattern = "call"\nconcurrency = 2\n'


def test_background_is_read_and_names_the_probe(tmp_path: Path) -> None:
    text = BASE + 'background = { pattern = "notify", rate = 1000, servers = 2, pools = 2 }\n'
    sc = load_profile(write_profile(tmp_path / "p.toml", text)).scenarios[0]
    assert sc.background is not None
    assert (sc.background.pattern, sc.background.rate) == ("notify", 1000.0)
    assert (sc.background.servers, sc.background.pools) == (2, 2)
    # the tables and comparisons tell the stressed probe from the calm one by its name
    assert sc.name == "call under notify@1000/s"


@pytest.mark.parametrize(
    ("background", "says"),
    [
        ('{ pattern = "publish", rate = 10 }', "call, cast, notify"),
        ('{ pattern = "notify" }', "rate in msg/s above 0"),
        ('{ pattern = "notify", rate = 0 }', "rate in msg/s above 0"),
        ('{ pattern = "cast", rate = 10, pools = 2 }', "notify background only"),
        ('{ pattern = "notify", rate = 10, colour = "red" }', "unknown key"),
        ('{ pattern = "notify", rate = 10, message_size = "big" }', "byte count"),
        ('"notify"', "expected a table"),
    ],
)
def test_a_bad_background_is_refused_with_its_field_named(
    tmp_path: Path, background: str, says: str
) -> None:
    path = write_profile(tmp_path / "p.toml", BASE + f"background = {background}\n")
    with pytest.raises(ProfileError) as info:
        load_profile(path)
    assert info.value.field.startswith("scenario[0].background")
    assert says in str(info.value)


def test_background_beside_a_rolling_update_is_refused(tmp_path: Path) -> None:
    text = (
        '[drivers.a]\nplugin = "loopback"\n[drivers.b]\nplugin = "loopback"\n'
        '[[scenario]]\npattern = "call"\nconcurrency = 2\n'
        'rolling = { from = "a", to = "b" }\n'
        'background = { pattern = "notify", rate = 10 }\n'
    )
    with pytest.raises(ProfileError, match="one-driver step"):
        load_profile(write_profile(tmp_path / "p.toml", text))


PROFILE = """
[run]
name = "probe"
duration = "3s"
warmup = "1s"
drain = "3s"

[drivers.lb]
plugin = "loopback"

[defaults]
serializer = "msgpack"
envelope = false
message_size = 200

[[scenario]]
pattern = "call"
concurrency = [2]
background = { pattern = "notify", rate = 200, servers = 2, pools = 2 }
"""


def test_the_probe_is_measured_and_the_background_counted_beside_it(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    proc = mqlab("run", str(write_profile(tmp_path / "p.toml", PROFILE)), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    (step,) = results(out)["steps"]
    # the probe: calls only, every one answered, none of the background's notifications in it
    assert step["pattern"] == "call" and step["sent"] > 0
    assert step["received"] == step["sent"] == step["round_trip"] and step["lost"] == 0
    bg = step["background"]
    assert (bg["pattern"], bg["rate"]) == ("notify", 200.0)
    # open loop through warm-up and window at 200/s; two pools each get every notification
    assert 0.9 * 200 * 4 <= bg["sent"] <= 1.1 * 200 * 4
    assert bg["expected"] == 2 * bg["sent"] and bg["received"] == bg["expected"]
    assert bg["lost"] == 0 and bg["duplicates"] == 0 and bg["unaccounted"] == 0
    assert bg["achieved_rate"] == pytest.approx(200.0, rel=0.1)
    # a loaded machine may fall a few per cent short: then the table must say so
    assert bg["kept_up"] is True or "(fell behind)" in proc.stdout
    assert bg["latency_ms"]["kind"] == "one_way" and bg["latency_ms"]["p50"] is not None
    # the final table says what the background achieved beside its probe
    assert "background stress" in proc.stdout and "notify@200/s" in proc.stdout
