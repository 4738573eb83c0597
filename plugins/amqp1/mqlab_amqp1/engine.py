"""The pump: a pyngus engine driven by the asyncio loop, without a thread.

An :class:`asyncio.Protocol` feeds the bytes it reads into the engine, writes
whatever the engine has to say, and a loop timer honours the engine's deadline
(heartbeats). Work that changes the engine (a send, a settlement, credit) asks
for one :meth:`EnginePump.wake`; every change made in one loop iteration is
then processed and written together.

Received messages are not handed to the application from inside pyngus'
callbacks: the receivers collect them in :attr:`EnginePump.incoming` while the
engine processes a read, and the pump dispatches them afterwards as one batch,
settled, with the credit topped up once per batch.

What the connection means (handshake, links, errors) is
:class:`mqlab_amqp1.connection.Amqp1Connection`, which subclasses this pump.
"""

from __future__ import annotations

import asyncio
import socket
from typing import TYPE_CHECKING, Any, cast

import proton

if TYPE_CHECKING:
    from mqlab_amqp1.links import Receiver


class EnginePump(asyncio.Protocol):
    """Moves bytes and timers between one pyngus connection and the asyncio loop."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        #: the pyngus connection; ``None`` once destroyed
        self.pyngus: Any = None
        #: messages received during an engine pass, dispatched after it
        self.incoming: list[tuple[Receiver, proton.Message, str]] = []
        self._transport: asyncio.Transport | None = None
        self._scheduled = False
        self._running = False
        self._eof_sent = False
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self._pending_input = b""
        #: the peer sent its close frame: only then is our half-close safe
        self.remote_closed = False

    def wake(self) -> None:
        """Ask for one engine pass on the next loop iteration."""
        if not self._scheduled and not self._running:
            self._scheduled = True
            self.loop.call_soon(self._run)

    def _run(self) -> None:
        self._scheduled = False
        conn = self.pyngus
        if conn is None or self._running:
            return
        self._running = True
        try:
            now = self.loop.time()
            conn.process(now)
            while self.incoming and self.pyngus is not None:
                batch, self.incoming = self.incoming, []
                touched: set[Receiver] = set()
                for receiver, message, handle in batch:
                    receiver.deliver(message, handle)
                    touched.add(receiver)
                for receiver in touched:
                    receiver.top_up()
                conn.process(now)
            self._flush()
            self._arm_timer()
        finally:
            self._running = False

    def _flush(self) -> None:
        conn = self.pyngus
        transport = self._transport
        if conn is None or transport is None:
            return
        while True:
            pending = conn.has_output
            if pending <= 0:
                break
            data = conn.output_data()
            if not data:
                break
            transport.write(data)
            conn.output_written(len(data))
        if pending < 0 and not self._eof_sent and self.remote_closed:
            # half-close: the broker may still have frames for us (its close)
            self._eof_sent = True
            if transport.can_write_eof():
                transport.write_eof()

    def _arm_timer(self) -> None:
        conn = self.pyngus
        deadline = conn.deadline if conn is not None else 0
        if deadline == self._timer_at:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_at = deadline
        if deadline:
            self._timer = self.loop.call_at(deadline, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at = 0.0
        self._run()

    # -- asyncio.Protocol ---------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses: no isinstance
        self._transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._run()

    def data_received(self, data: bytes) -> None:
        conn = self.pyngus
        if conn is None:
            return
        if self._pending_input:
            data = self._pending_input + data
            self._pending_input = b""
        while data:
            count = conn.process_input(data)
            if count <= 0:
                if count == 0:
                    # engine full: keep the rest until it has room again
                    self._pending_input = data
                    self.loop.call_soon(self._retry_input)
                break
            data = data[count:]
        self._run()

    def _retry_input(self) -> None:
        if self._pending_input:
            self.data_received(b"")

    def eof_received(self) -> bool:
        if self.pyngus is not None:
            self.pyngus.close_input()
            self._run()
        # keep our half open: the engine may still write its close frame
        return True
