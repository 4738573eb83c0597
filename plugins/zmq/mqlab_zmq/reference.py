"""pyzmq's own ceiling for cast: a bare PUSH/PULL pair, blocking sockets.

The thinnest use of pyzmq for what the plugin's cast does (a PUSH to a
server's PULL over TCP on loopback): ``send`` in a tight loop, ``recv`` in
another process, with the plugin's high-water mark. There are no acks in
ZeroMQ, so the mode is always "no ack"; PerfTest does not apply (no broker).

Both calls copy (pyzmq's default, and the plugin's): for a message this small
``copy=False`` costs more than it saves (a send below pyzmq's copy threshold, 64 KiB,
copies all the same, and each call builds a ``Frame`` object). The loop once passed
``copy=False`` on both sides and understated pyzmq by about a quarter
(benchmarks/zmq_cast.py, 200 bytes, quiet: 770,000 to 830,000 msg/s; copying on both
sides, 1,040,000 to 1,060,000, the consumer's CPU a message 0.50 µs against 0.80-0.88).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import zmq

from mqlab.sdk.reference import ReferenceLoop, Tally

#: milliseconds a blocked send or recv waits before looking at ``tally.stop``
TICK_MS = 100


class ZmqReference(ReferenceLoop):
    library: ClassVar[str] = "pyzmq"

    @classmethod
    def auto_ack(cls, options: Mapping[str, Any]) -> bool:
        return True

    @classmethod
    def describe(cls, options: Mapping[str, Any]) -> str:
        return "PUSH/PULL, no acks"

    def _socket(self, ctx: zmq.Context[Any], kind: int) -> zmq.Socket[Any]:
        sock: zmq.Socket[Any] = ctx.socket(kind)
        hwm = int(self.spec.options["hwm"])
        sock.setsockopt(zmq.SNDHWM, hwm)
        sock.setsockopt(zmq.RCVHWM, hwm)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.RCVTIMEO, TICK_MS)
        sock.setsockopt(zmq.SNDTIMEO, TICK_MS)
        return sock

    def consume(self, tally: Tally, ready: Callable[[str], None]) -> None:
        with zmq.Context() as ctx, self._socket(ctx, zmq.PULL) as sock:
            sock.bind(f"tcp://{self.spec.options['bind_address']}:*")
            ready(sock.getsockopt_string(zmq.LAST_ENDPOINT))
            recv = sock.recv
            while not tally.stop:
                try:
                    recv()
                except zmq.Again:
                    continue
                tally.n += 1

    def publish(self, tally: Tally) -> None:
        with zmq.Context() as ctx, self._socket(ctx, zmq.PUSH) as sock:
            sock.connect(self.spec.peer)
            send, body = sock.send, self.spec.body
            while not tally.stop:
                try:
                    send(body)
                except zmq.Again:
                    continue
                tally.n += 1
