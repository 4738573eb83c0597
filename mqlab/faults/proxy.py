"""The TCP fault proxy: one process between a step's workers and one broker node.

Run as ``python -m mqlab.faults.proxy HOST PORT [LISTEN]``: it listens on a free port
of LISTEN (the loopback address unless given: a lossy step's workers reach it from their
network namespace at its root address), prints ``{"port": N}`` on stdout, forwards every
connection to HOST:PORT, and takes one JSON command per line on stdin, answering one line each:

- ``{"action": "delay", "ms": 200, "jitter_ms": 20}``: every chunk, both ways,
  is held ms ± jitter (uniform) before it is forwarded, in order; up to 64 chunks
  (4 MiB) per direction are in flight at once, as on a long TCP link;
- ``{"action": "bandwidth", "kbps": 512}``: each direction of each connection
  forwards at most that many kbit/s;
- ``{"action": "cut"}``: nothing is forwarded, either way, and new connections
  are held unanswered; sockets stay open, so no peer sees a FIN or an RST (the
  kernel's buffers fill, as on a link that drops every packet);
- ``{"action": "reset"}``: every open connection is reset on both sides
  (SO_LINGER 0, then close: an RST each way);
- ``{"action": "restore"}``: no delay, no limit, no cut; held data flows on;
- ``{"action": "held"}``: what the proxy holds now, as one JSON object after ``ok:``:
  ``held_bytes`` (read and not yet forwarded, or arrived on its sockets and not yet
  read: a cut stops reading, so the senders' data waits there), ``connections`` (open,
  and ``waiting``: made during a cut and not yet answered), ``in_force`` (the
  shaping still applied: ``cut``, ``delay``, ``bandwidth``) and ``clear_s``, when what
  it holds now will have been forwarded at the latest (null while cut: never).

It is its own process so that its CPU is measured apart from the controller's
and the workers'. It has no notion of packets: packet loss is made on the link to it
(:mod:`mqlab.netns`), not here.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import random
import signal
import socket
import struct
import sys
import termios
import time
from dataclasses import dataclass

_CHUNK = 65536
#: chunks one direction holds while their delay runs: up to 4 MiB in flight, about what
#: Linux lets a TCP connection have unacknowledged on a long link
_IN_FLIGHT = 64
#: a bandwidth limit forwards this much at a time (about three full Ethernet frames)
_SLICE = 4096


@dataclass
class Shaping:
    delay_s: float = 0.0
    jitter_s: float = 0.0
    bytes_per_s: float = 0.0  # 0: no limit
    cut: bool = False


class Proxy:
    def __init__(self, host: str, port: int) -> None:
        self.upstream = (host, port)
        self.shape = Shaping()
        self.flowing = asyncio.Event()  # cleared while cut
        self.flowing.set()
        self.links: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()
        #: each open connection's two readers: data they buffered is held too
        self.readers: set[tuple[asyncio.StreamReader, asyncio.StreamReader]] = set()
        self.pending = 0  # bytes read and not yet written on (in the chunk queues)
        self.waiting = 0  # connections made during a cut, not yet answered
        self.due = 0.0  # monotonic time the last chunk read so far is due to be forwarded

    async def serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            await self._serve(client_r, client_w)
        except asyncio.CancelledError:
            # the proxy is exiting with this connection open (held by a cut or a delay, or
            # a FIN lost on a lossy link): end quietly, as Python 3.11's stream callback
            # would log a cancelled handler's CancelledError with a traceback
            _reset(client_w)

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        self.waiting += 1
        try:
            await self.flowing.wait()  # a connection made during a cut is held, unanswered
        finally:
            self.waiting -= 1
        try:
            up_r, up_w = await asyncio.open_connection(*self.upstream)
        except OSError:
            _reset(client_w)
            return
        link = (client_w, up_w)
        self.links.add(link)
        readers = (client_r, up_r)
        self.readers.add(readers)
        try:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(self._pump(client_r, up_w))
                tg.create_task(self._pump(up_r, client_w))
        except* (OSError, EOFError):
            pass
        finally:
            self.links.discard(link)
            self.readers.discard(readers)
            for w in link:
                with contextlib.suppress(OSError, RuntimeError):
                    w.close()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One direction, in order: chunks are read as they come and each is written once
        its delay is over, so a delayed link still carries a window of data in flight (as
        TCP does on a long link) instead of one read per delay."""
        chunks: asyncio.Queue[tuple[float, bytes] | None] = asyncio.Queue(_IN_FLIGHT)
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self._read(reader, chunks))
            tg.create_task(self._write(writer, chunks))

    async def _read(
        self, reader: asyncio.StreamReader, chunks: asyncio.Queue[tuple[float, bytes] | None]
    ) -> None:
        due = 0.0
        while True:
            await self.flowing.wait()  # while cut: not read, so the sender's buffers fill
            data = await reader.read(_CHUNK)
            if not data:
                await chunks.put(None)
                return
            s = self.shape
            hold = 0.0
            if s.delay_s or s.jitter_s:
                hold = max(0.0, s.delay_s + random.uniform(-s.jitter_s, s.jitter_s))
            due = max(due, time.monotonic() + hold)  # never reorder the stream
            self.pending += len(data)
            self.due = max(self.due, due)
            await chunks.put((due, data))  # full: the window is in flight, stop reading

    async def _write(
        self, writer: asyncio.StreamWriter, chunks: asyncio.Queue[tuple[float, bytes] | None]
    ) -> None:
        while (item := await chunks.get()) is not None:
            due, data = item
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            await self.flowing.wait()  # a cut during the hold holds this chunk too
            s = self.shape
            if not s.bytes_per_s:
                writer.write(data)
                self.pending -= len(data)
                await writer.drain()
                continue
            for i in range(0, len(data), _SLICE):  # a slow link: each slice takes its time
                piece = data[i : i + _SLICE]
                await asyncio.sleep(len(piece) / s.bytes_per_s)
                writer.write(piece)
                self.pending -= len(piece)
                await writer.drain()
        with contextlib.suppress(OSError, RuntimeError):
            writer.write_eof()

    def command(self, cmd: dict[str, object]) -> str:
        action = cmd.get("action")
        if action == "delay":
            self.shape.delay_s = float(str(cmd.get("ms", 0))) / 1000
            self.shape.jitter_s = float(str(cmd.get("jitter_ms", 0))) / 1000
        elif action == "bandwidth":
            self.shape.bytes_per_s = float(str(cmd.get("kbps", 0))) * 1000 / 8
        elif action == "cut":
            self.shape.cut = True
            self.flowing.clear()
        elif action == "reset":
            n = len(self.links)
            for link in list(self.links):
                for w in link:
                    _reset(w)
            return f"ok: {n} connection(s) reset"
        elif action == "restore":
            self.shape = Shaping()
            self.flowing.set()
        elif action == "held":
            return "ok: " + json.dumps(self.held())
        else:
            return f"error: unknown action {action!r}"
        return f"ok: {len(self.links)} connection(s) open"

    def held(self) -> dict[str, object]:
        """What the proxy holds now: bytes, connections and the shaping in force."""
        unread = 0
        for link in self.links:
            for w in link:
                unread += _unread(w)
        for readers in self.readers:
            for r in readers:
                # what a reader took off its socket and was not yet asked for: while cut,
                # up to its high-water mark (asyncio keeps it in a private buffer)
                unread += len(getattr(r, "_buffer", b""))
        s = self.shape
        in_force = [
            name
            for name, on in (
                ("cut", s.cut),
                ("delay", bool(s.delay_s or s.jitter_s)),
                ("bandwidth", bool(s.bytes_per_s)),
            )
            if on
        ]
        held = max(0, self.pending) + unread
        clear_s: float | None = None
        if not s.cut:
            # the last chunk read is due then; what waits unread gets the whole delay after
            # it is read; a limit forwards everything held at its rate
            clear_s = max(0.0, self.due - time.monotonic()) if self.pending > 0 else 0.0
            if unread:
                clear_s += s.delay_s + s.jitter_s
            if s.bytes_per_s:
                clear_s += held / s.bytes_per_s
        return {
            "held_bytes": held,
            "clear_s": None if clear_s is None else round(clear_s, 3),
            "connections": len(self.links),
            "waiting": self.waiting,
            "in_force": in_force,
        }


def _unread(writer: asyncio.StreamWriter) -> int:
    """Bytes that arrived on the connection's socket and were not yet read (FIONREAD)."""
    sock = writer.get_extra_info("socket")
    try:
        buf = fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0")
    except (OSError, AttributeError, ValueError):
        return 0
    return int(struct.unpack("i", buf)[0])


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with SO_LINGER 0: the peer gets an RST, not a FIN."""
    sock = writer.get_extra_info("socket")
    with contextlib.suppress(OSError, AttributeError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


async def main(host: str, port: int, listen: str = "127.0.0.1") -> None:
    proxy = Proxy(host, port)
    server = await asyncio.start_server(proxy.serve, listen, 0)
    print(json.dumps({"port": server.sockets[0].getsockname()[1]}), flush=True)
    loop = asyncio.get_running_loop()
    stdin = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin)
    async with server:
        while line := await stdin.readline():
            try:
                answer = proxy.command(json.loads(line))
            except (ValueError, TypeError) as exc:
                answer = f"error: {exc}"
            print(answer, flush=True)
    # stdin closed: the controller is gone or done; so is the proxy


def _quiet(loop: asyncio.AbstractEventLoop, context: dict[str, object]) -> None:
    """A connection's error ends that connection; nothing is written over the live monitor."""


if __name__ == "__main__":
    # the controller stops the proxy by closing its stdin; a Ctrl-C at the terminal reaches
    # the whole process group and must not print a traceback over the monitor
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with asyncio.Runner() as runner:
        runner.get_loop().set_exception_handler(_quiet)
        runner.run(main(sys.argv[1], int(sys.argv[2]), *sys.argv[3:4]))
