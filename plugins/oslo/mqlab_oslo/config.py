"""oslo.messaging's configuration for one mqlab driver: its options, its transport URL.

oslo.messaging reads everything from an ``oslo.config`` ``ConfigOpts``. Each
transport gets a private one (never the global ``cfg.CONF``, never a file on
disk), with the options a user tunes passed through from the profile, so that
a run measures the driver as a deployment configured like that would run it.
"""

from __future__ import annotations

import importlib
import urllib.parse
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

with warnings.catch_warnings():
    # oslo.service, imported by oslo.messaging, imports eventlet, which warns that it is
    # deprecated; mqlab never uses eventlet (the threading executor needs none)
    warnings.simplefilter("ignore")
    import oslo_messaging
    import oslo_messaging.opts
    from oslo_config import cfg

from mqlab.errors import ConnectFailed
from mqlab.sdk.urls import mask

__all__ = ["PASSED_THROUGH", "make_conf", "oslo_messaging", "transport_url"]

RABBIT = "oslo_messaging_rabbit"

#: mqlab option -> (oslo group, oslo option); ``None`` group = [DEFAULT]
PASSED_THROUGH: Mapping[str, tuple[str | None, str]] = {
    "heartbeat": (RABBIT, "heartbeat_timeout_threshold"),
    "prefetch": (RABBIT, "rabbit_qos_prefetch_count"),
    "amqp_durable_queues": (RABBIT, "amqp_durable_queues"),
    "threads": (None, "executor_thread_pool_size"),
}


#: option lists beyond list_opts() (which misses metrics and tracing, yet the driver reads
#: them), as oslo's own ConfFixture registers them on a ConfigOpts other than cfg.CONF;
#: ConfFixture itself needs the ``fixtures`` test library
_OPTION_LISTS: tuple[tuple[str, str, str | None], ...] = (
    ("oslo_messaging._drivers.impl_rabbit", "rabbit_opts", RABBIT),
    ("oslo_messaging._drivers.amqp", "amqp_opts", RABBIT),
    ("oslo_messaging.rpc.client", "_client_opts", None),
    ("oslo_messaging.transport", "_transport_opts", None),
    ("oslo_messaging.rpc.dispatcher", "_dispatcher_opts", None),
    ("oslo_messaging.notify.notifier", "_notifier_opts", "oslo_messaging_notifications"),
    ("oslo_messaging._metrics.client", "oslo_messaging_metrics", "oslo_messaging_metrics"),
    ("oslo_messaging._tracing.client", "oslo_messaging_tracing", "oslo_messaging_tracing"),
)


def transport_url(urls: Sequence[str]) -> str:
    """mqlab's ``amqp://user:pass@host:port/vhost`` URL(s) as one ``rabbit://`` URL.

    Several URLs become oslo's host list (``rabbit://u:p@h1:p1,u:p@h2:p2/vhost``):
    oslo connects to the first that answers and fails over to the others.
    """
    hosts: list[str] = []
    vhost = ""
    for url in urls:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme != "amqp":
            raise ConnectFailed(
                f"the oslo plugin takes amqp:// URLs, got {mask(url)} (use amqp://host:5672/)"
            )
        hosts.append(parts.netloc)
        vhost = parts.path.lstrip("/")
    if not hosts:
        raise ConnectFailed("no server URL given for the oslo plugin")
    # oslo reads the path as the vhost; an empty one means kombu's default "/"
    return f"rabbit://{','.join(hosts)}/{vhost}"


def make_conf(
    options: Mapping[str, Any],
    exchange: str,
    passed: Mapping[str, tuple[str | None, str]] = PASSED_THROUGH,
) -> cfg.ConfigOpts:
    """A private ConfigOpts with every oslo.messaging option registered and ours set
    (``passed``: mqlab option -> (oslo group, oslo option), the rabbit driver's by default)."""
    conf = cfg.ConfigOpts()
    conf([], project="mqlab", default_config_files=[], default_config_dirs=[])
    for group, opts in oslo_messaging.opts.list_opts():
        conf.register_opts(opts, group=group)
    for module, attr, group in _OPTION_LISTS:
        conf.register_opts(getattr(importlib.import_module(module), attr), group=group)
    for name, (group, oslo_name) in passed.items():
        conf.set_override(oslo_name, options[name], group=group)
    # RPC targets name their exchange; notifications go to the control exchange
    conf.set_override("control_exchange", exchange)
    return conf
