"""The frames this plugin puts on the wire (its ``zmq`` wire family).

- call request, DEALER -> ROUTER: ``[token, corr, body]`` (the ROUTER prepends
  the caller's identity frame, and routes the reply back by it)
- call reply, ROUTER -> DEALER: ``[corr, status, payload]``
- cast and notification, PUSH -> PULL: one frame, ``cast_header(token) + body``
  (one frame, not two: a multipart send or receive costs a second system call
  and pyzmq's flag arithmetic for every message, the largest share of a cast)

``token`` is the instance id of the record the sender looked up. A server
checks it, so a request that reaches a socket which is not the one the
matchmaker named (an ephemeral port reused after a crash) is refused instead of
being handed to the wrong handler. ``corr`` is 8 bytes, unique per client.
"""

from __future__ import annotations

import struct

#: reply status: ``payload`` is the handler's reply
OK = b"\x00"
#: reply status: the handler raised; ``payload`` is the error text (utf-8)
FAILED = b"\x01"
#: reply status: the token did not match; the record the client used is stale
STRANGER = b"\x02"

corr_bytes = struct.Struct(">Q").pack


def cast_header(token: bytes) -> bytes:
    """What starts every cast frame: the token's length (one byte), then the token.

    The length makes a stale token of another length unequal to the header
    even where it is a prefix of the right one.
    """
    return bytes((len(token),)) + token
