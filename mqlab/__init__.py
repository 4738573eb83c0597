"""mqlab: compare messaging drivers side by side.

The public contract for plugin authors is :mod:`mqlab.transport` and
:mod:`mqlab.errors` (plus :mod:`mqlab.sdk.amqp` for AMQP 0-9-1 plugins that share the
oslo-style topology).
"""

from mqlab import native

# before any hot module is imported: compiled, or (stale, or not built) the pure sources
native.guard()

from mqlab.errors import (  # noqa: E402 - after the guard, as every other import
    CallTimeout,
    ConnectFailed,
    ConnectionLost,
    DriverError,
    MqlabError,
    OptionError,
    TransportError,
    Undeliverable,
)
from mqlab.transport import (  # noqa: E402 - after the guard
    Features,
    Handler,
    Option,
    OptionConflict,
    Target,
    Transport,
    TransportConfig,
)

__version__ = "0.1.0"

__all__ = [
    "CallTimeout",
    "ConnectFailed",
    "ConnectionLost",
    "DriverError",
    "Features",
    "Handler",
    "MqlabError",
    "Option",
    "OptionConflict",
    "OptionError",
    "Target",
    "Transport",
    "TransportConfig",
    "TransportError",
    "Undeliverable",
    "__version__",
]
