"""Async variants of the memory's two hot calls, mixed into `DecisionAwareMemory`.

`await memory.abuild_context(...)` and `await memory.aadd_messages(...)` take the same arguments and return the same
results as `build_context` / `add_messages`. Each call runs in a worker thread (`asyncio.to_thread`), so the event
loop keeps serving other coroutines while the memory embeds, values and counts tokens. The calls of one memory run
one at a time (one lock per memory): the store, the FAISS index and the valuer's cache see no interleaving;
different memories run in parallel.

Example:
    >>> ctx = await memory.abuild_context(messages, tools=tools, session_id="chat-42")
    >>> reply = await aclient.chat.completions.create(model=..., messages=ctx.messages, tools=tools)
"""

from __future__ import annotations

import asyncio
import threading
from typing import TYPE_CHECKING, Any, Iterable, Sequence

if TYPE_CHECKING:
    from damc.runtime.context import Context


class AsyncMethods:
    """`abuild_context` / `aadd_messages` for a class that has `build_context` / `add_messages`."""

    build_context: Any
    add_messages: Any

    async def aadd_messages(self, messages: Iterable[dict[str, Any]], session_id: str | None = None, *,
                            user_id: str | None = None, agent_id: str | None = None) -> list[str]:
        """`add_messages` in a worker thread (see the module docstring)."""
        msgs = list(messages)   # an iterator the caller hands over is consumed here, not in the thread
        return await asyncio.to_thread(self._serialized, self.add_messages, msgs, session_id, user_id=user_id,
                                       agent_id=agent_id)

    async def abuild_context(self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None = None,
                             *args: Any, **kwargs: Any) -> "Context":
        """`build_context` in a worker thread (see the module docstring): same arguments, same `Context`."""
        return await asyncio.to_thread(self._serialized, self.build_context, list(messages), tools, *args, **kwargs)

    def _serialized(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """Run `fn` under the memory's lock (in the worker thread that called it)."""
        with self._async_lock:
            return fn(*args, **kwargs)

    @property
    def _async_lock(self) -> threading.Lock:
        lock = self.__dict__.get("_alock")
        if lock is None:   # created on first use; setdefault keeps one lock if two threads race here
            lock = self.__dict__.setdefault("_alock", threading.Lock())
        return lock
