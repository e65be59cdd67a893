"""``specd lsp --in-process``: the engine in this process, generations on one worker thread."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Callable

from specd.engine.engine import Engine
from specd.requests import Cancelled, CompletionRequest, RequestError
from specd.lsp.backend import BackendUnavailable, Superseded


class InProcessBackend:
    def __init__(self, load: Callable[[], Engine]) -> None:
        self._load = load
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="specd-engine")
        self._engine: asyncio.Future[Engine] | None = None

    def describe(self) -> str:
        return "in-process engine"

    def _loading(self) -> asyncio.Future[Engine]:
        if self._engine is None:
            self._engine = asyncio.get_running_loop().run_in_executor(self._executor, self._load)
        return self._engine

    async def start(self) -> None:
        await self._ready()

    async def _ready(self) -> Engine:
        try:
            return await asyncio.shield(self._loading())
        except asyncio.CancelledError:
            raise
        except Exception as e:
            raise BackendUnavailable(f"the engine failed to load: {type(e).__name__}: {e}") from e

    async def complete(self, request: CompletionRequest, session: str) -> str:
        engine = await self._ready()
        stop = threading.Event()
        work = asyncio.get_running_loop().run_in_executor(
            self._executor, partial(engine.complete, request, None, stop.is_set))
        try:
            return (await work).text
        except asyncio.CancelledError:
            stop.set()  # the engine raises Cancelled at its next round
            raise
        except Cancelled as e:
            raise Superseded("cancelled") from e
        except RequestError as e:
            raise BackendUnavailable(f"request refused: {e}") from e
        except Exception as e:
            raise BackendUnavailable(f"model failure: {type(e).__name__}: {e}") from e

    async def warm(self, request: CompletionRequest, session: str) -> int:
        """Not here: the engine's one worker thread would make the next completion wait for it."""
        return 0

    async def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
