"""Faults that must stay quiet (issue 33, class 6).

The fault proxy is a process of its own in the terminal's process group: its asyncio
tracebacks (a connection reset under it, a Ctrl-C that reaches the whole group) were
printed over the live monitor. Nothing it says reaches the terminal now.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket

import pytest

from mqlab.faults.link import LinkFaults


async def _rude_upstream() -> tuple[asyncio.Server, int]:
    """A server that answers every connection with a reset: errors under the proxy."""

    async def rude(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(10)
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        writer.transport.abort()

    server = await asyncio.start_server(rude, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def _troubles() -> None:
    server, port = await _rude_upstream()
    links = LinkFaults(lambda: asyncio.sleep(0, "node1"))
    try:
        proxied = (await links.start((f"amqp://127.0.0.1:{port}/",)))[f"amqp://127.0.0.1:{port}/"]
        proxy_port = int(proxied.rsplit(":", 1)[1].strip("/"))
        for _ in range(5):  # connections the upstream resets, one the proxy resets itself
            with socket.create_connection(("127.0.0.1", proxy_port), 5) as s:
                s.sendall(b"hello")
                await asyncio.sleep(0.05)
        p = next(iter(links.proxies.values()))
        assert "reset" in await p.command({"action": "reset"})
        os.kill(p.proc.pid, signal.SIGINT)  # a Ctrl-C at the terminal reaches the proxy too
        await asyncio.sleep(0.5)
    finally:
        await links.stop()
        server.close()


def test_the_fault_proxy_never_writes_to_the_terminal(capfd: pytest.CaptureFixture[str]) -> None:
    asyncio.run(_troubles())
    err = capfd.readouterr().err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err and err == "", err
