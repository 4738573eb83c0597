"""The broker hosts of a ``[hosts]`` run, reached from any thread of the controller.

A managed broker on a broker host is started before the run's steps and stopped after
them, and is asked things (a node killed, its CPU sampled) from the threads the runner
calls blocking code in. So :class:`BrokerHosts` keeps an asynchronous Dask client on an
event loop of its own, in a thread, and every call from another thread waits on it with
a deadline. What goes wrong is a :class:`~mqlab.hosts.cluster.HostsError`, one line naming
the host and the cause.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar
from urllib.parse import urlsplit

from distributed import Client

from mqlab.config.hosts import Hosts
from mqlab.hosts import clock
from mqlab.hosts.cluster import HostsError, connect, worker_addresses

__all__ = ["BrokerHosts"]

_T = TypeVar("_T")
#: seconds to reach the scheduler and find the broker hosts' workers, beyond the profile's own
_OPEN_LIMIT = 30.0


class BrokerHosts:
    """The profile's broker hosts (``[hosts] brokers``) through Dask (see the module doc)."""

    def __init__(self, hosts: Hosts) -> None:
        self.hosts = dataclasses.replace(hosts, servers=(), clients=())
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="mqlab-brokers",
                                        daemon=True)  # fmt: skip
        self._client: Client | None = None
        self._connection: contextlib.AbstractAsyncContextManager[Client] | None = None
        self._addresses: dict[str, str] = {}

    def _wait(self, coro: Coroutine[Any, Any, _T], limit: float) -> _T:
        return asyncio.run_coroutine_threadsafe(asyncio.wait_for(coro, limit), self._loop).result()

    def open(self) -> None:
        """Reach the scheduler and every broker host's worker (running this mqlab)."""
        self._thread.start()

        async def opening() -> None:
            self._connection = connect(self.hosts)
            self._client = await self._connection.__aenter__()
            limit = self.hosts.no_workers_timeout
            self._addresses = await worker_addresses(self._client, self.hosts, limit)
            await clock.install(self._client, list(self._addresses.values()))

        self._wait(opening(), self.hosts.no_workers_timeout + _OPEN_LIMIT)

    def close(self) -> None:
        async def closing() -> None:
            if self._connection is not None:
                await self._connection.__aexit__(None, None, None)

        try:
            if self._thread.is_alive():
                with contextlib.suppress(Exception):
                    self._wait(closing(), 15)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            if self._thread.is_alive():
                self._thread.join(5)

    def __enter__(self) -> BrokerHosts:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def address(self, name: str) -> str:
        """The host's address (its Dask worker's, without the port): where a node listens."""
        return urlsplit(self._addresses[name]).hostname or ""

    def run(self, name: str, fn: Callable[..., Any], *args: Any, timeout: float) -> Any:
        """``fn(*args)`` in the Dask worker of broker host ``name``: its result; HostsError
        naming the host when the worker is gone or does not answer within ``timeout`` s."""
        addr = self._addresses[name]
        assert self._client is not None

        async def running() -> Any:
            assert self._client is not None
            return (await self._client.run(fn, *args, workers=[addr]))[addr]

        try:
            return self._wait(running(), timeout)
        except TimeoutError:
            raise HostsError(f"broker host {name} ({addr}) did not answer within "
                             f"{timeout:g}s") from None  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - Dask's comm errors, a worker gone: one line
            raise HostsError(
                f"broker host {name} ({addr}): {type(exc).__name__}: {str(exc)[:160]}"
            ) from None

    def offset(self, name: str) -> tuple[int, int]:
        """Host ``name``'s monotonic clock less this controller's, and its bound (ns)."""
        assert self._client is not None
        try:
            o = self._wait(clock.measure(self._client, self._addresses[name]), 30)
        except Exception as exc:  # noqa: BLE001 - as run()
            raise HostsError(f"broker host {name}: its clock: {type(exc).__name__}") from None
        return o.offset_ns, o.bound_ns
