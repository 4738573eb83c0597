"""URLs shown or saved never carry a password, whatever characters it holds."""

from __future__ import annotations

import pytest

from mqlab.sdk.urls import endpoint, hide_secret, host_port, mask


@pytest.mark.parametrize(
    ("url", "masked"),
    [
        ("amqp://guest:secret@127.0.0.1:5672/", "amqp://guest:***@127.0.0.1:5672/"),
        ("amqp://127.0.0.1:5672/", "amqp://127.0.0.1:5672/"),
        ("amqp://user@host/", "amqp://user@host/"),
        ("amqp://u:p#ss@h:5672/vh", "amqp://u:***@h:5672/vh"),
        ("amqp://u:a/b?c@h/", "amqp://u:***@h/"),
        ("amqp://u:p@ss@h:1/", "amqp://u:***@h:1/"),
        ("redis://:tok%2Fen@[::1]:6380/0", "redis://:***@[::1]:6380/0"),
        ("nats://h", "nats://h"),
        ("not a url", "not a url"),
    ],
)
def test_mask_hides_every_password(url: str, masked: str) -> None:
    assert mask(url) == masked


@pytest.mark.parametrize(
    ("url", "where"),
    [
        ("amqp://h", ("h", 5672)),
        ("amqps://u:p@h/", ("h", 5671)),
        ("redis://h/0", ("h", 6379)),
        ("nats://u:p#w@h", ("h", 4222)),
        ("mqtt://h", ("h", 1883)),
        ("amqp://u:x/y@h:5999/", ("h", 5999)),
        ("redis://[::1]:7000", ("::1", 7000)),
    ],
)
def test_host_port_uses_each_schemes_default_port(url: str, where: tuple[str, int]) -> None:
    assert host_port(url) == where


def test_endpoint_and_library_messages_never_show_the_password() -> None:
    url = "amqp://guest:p%40ss#1@[::1]/"
    assert endpoint(url) == "[::1]:5672"
    assert hide_secret("login p@ss#1 / p%40ss#1 refused", url) == "login *** / *** refused"


def test_a_scheme_a_plugin_declares_has_its_default_port_and_an_unknown_one_none() -> None:
    """Before: an unknown scheme's URL without a port meant 5672, so the fault proxy (and
    the kit's dropped connection) sent a plugin's traffic to RabbitMQ's port."""
    from mqlab.loopback import LoopbackTransport
    from mqlab.registry import LoadedPlugin

    with pytest.raises(ValueError, match=r"names no port .* add :PORT"):
        host_port("kitbus://u:pw@h/")
    assert host_port("kitbus://h:7/") == ("h", 7)
    assert endpoint("kitbus://h/") == "h:?"

    class KitBus(LoopbackTransport):
        url_schemes = {"kitbus": 4100}  # noqa: RUF012 - as a plugin declares it

    LoadedPlugin("kitbus", "kit", "1", KitBus)  # loading a plugin declares its schemes
    assert host_port("kitbus://u:pw@h/") == ("h", 4100)
