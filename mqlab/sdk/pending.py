"""The calls a client waits for: a future per correlation id, one timeout wording.

Every request/reply driver keeps this table: the call registers its id before
sending, the reply consumer resolves it, and a lost connection rejects every
waiting call at once instead of letting each run into its timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from mqlab.errors import CallTimeout, ConnectionLost, TransportError
from mqlab.transport import Target


def call_timeout(target: Target, timeout: float) -> CallTimeout:
    """The one CallTimeout message of every driver."""
    return CallTimeout(
        f"no reply from {target.describe()} within {timeout:g}s (is a server running for it?)"
    )


class PendingCalls:
    """Futures of the calls waiting for a reply, by correlation id."""

    def __init__(self) -> None:
        # keys are whatever the driver correlates by: str ids, or bytes off the wire
        self._futures: dict[object, asyncio.Future[bytes]] = {}

    def __len__(self) -> int:
        return len(self._futures)

    def __contains__(self, corr_id: object) -> bool:
        return corr_id in self._futures

    def expect(self, corr_id: object) -> asyncio.Future[bytes]:
        """Register a call before its request is sent (a fast reply must find it)."""
        fut: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._futures[corr_id] = fut
        return fut

    def resolve(self, corr_id: object, body: bytes) -> bool:
        """Hand a reply to its call; False for a late or foreign reply (it is dropped)."""
        fut = self._futures.pop(corr_id, None)
        if fut is None or fut.done():
            return False
        fut.set_result(body)
        return True

    def fail(self, corr_id: object, exc: BaseException) -> None:
        """Fail one call (e.g. its request came back undeliverable)."""
        fut = self._futures.pop(corr_id, None)
        if fut is not None and not fut.done():
            fut.set_exception(exc)

    def forget(self, corr_id: object) -> None:
        """Drop a finished call; an exception set meanwhile counts as seen."""
        fut = self._futures.pop(corr_id, None)
        if fut is not None and fut.done() and not fut.cancelled():
            fut.exception()

    def reject_all(self, exc: BaseException | None = None) -> None:
        """Fail every waiting call at once (connection lost, transport closing)."""
        exc = exc or ConnectionLost("the connection was lost while waiting for a reply")
        futures, self._futures = self._futures, {}
        for fut in futures.values():
            if not fut.done():
                fut.set_exception(exc)
                fut.exception()  # a caller that already gave up must not log it

    def close(self) -> None:
        """Fail every waiting call: the transport is closing (one wording for every driver)."""
        self.reject_all(ConnectionLost("the transport closed while waiting for a reply"))

    @contextlib.asynccontextmanager
    async def waiting(
        self, corr_id: str, target: Target, timeout: float
    ) -> AsyncIterator[asyncio.Future[bytes]]:
        """Register ``corr_id`` and bound the whole call (send and wait) by ``timeout``.

        Yields the reply's future; raises :func:`call_timeout` when the deadline
        passes, and always forgets the call. A ``TimeoutError`` the driver raised
        itself before the deadline stays what it was.
        """
        fut = self.expect(corr_id)
        deadline = asyncio.timeout(timeout)
        try:
            async with deadline:
                yield fut
        except TimeoutError as exc:
            if deadline.expired() and not isinstance(exc, TransportError):
                raise call_timeout(target, timeout) from exc
            raise
        finally:
            self.forget(corr_id)
