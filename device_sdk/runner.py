"""`DeviceClient.start()` / `stop()`: the client's `run_forever` in a background thread with its own event loop.

For apps that are not written with asyncio. `stop()` sets the loop's stop event from the calling thread; the
client leaves any long-poll or cohort at once (the cohort treats it as a dropout), closes its HTTP
connections and the thread ends — well within a second. An error that ends `run_forever` (a server of
another protocol version) ends the thread; it is logged, passed to `on_error` and kept in `error`.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from device_sdk.client import DeviceClient

log = logging.getLogger(__name__)


class BackgroundRunner:
    def __init__(self, client: DeviceClient) -> None:
        self.client = client
        self.error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._stop_requested = False
        self._thread = threading.Thread(target=self._main, name=f"fa-device-{client.device_id[:8]}", daemon=True)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def start(self) -> None:
        self._thread.start()
        self._ready.wait(5.0)

    def request_stop(self) -> None:
        """Ask the loop to stop (any thread, including the runner's own callbacks); does not wait."""
        self._stop_requested = True
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(stop.set)
            except RuntimeError:  # the loop closed meanwhile
                pass

    def stop(self, timeout: float = 5.0) -> bool:
        """Stop and wait up to `timeout` seconds for the thread to end; True when it has."""
        self.request_stop()
        if threading.current_thread() is self._thread:
            return False  # called from a callback: the thread ends once the callback returns
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _main(self) -> None:
        try:
            asyncio.run(self._run())
        except BaseException as exc:  # logged and kept: a thread's exception would otherwise vanish
            self.error = exc
            log.error("device %s: background thread ended: %s", self.client.device_id[:8], exc)
        finally:
            self._ready.set()

    async def _run(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        if self._stop_requested:
            self._stop.set()
        self._ready.set()
        try:
            await self.client.run_forever(self._stop)
        finally:
            await self.client.close()
