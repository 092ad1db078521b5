"""Which requests read from stdin are still owed an answer: counted in as the stdio transport reads them, out as
the server writes their response (or settles them unanswered, as it does a request the client cancelled), so
that the end of stdin can wait for the last one (protocol/stdio_transport.py)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable
from types import TracebackType

import anyio
from anyio.streams.memory import MemoryObjectSendStream
from mcp.shared.message import SessionMessage
from mcp_types import JSONRPCError, JSONRPCResponse, RequestId


class Outstanding:
    """Requests read and not yet answered, by id, counted: a client may use one id twice."""

    def __init__(self) -> None:
        self._ids: Counter[RequestId] = Counter()
        self._none = anyio.Event()
        self._none.set()

    def __len__(self) -> int:
        return self._ids.total()

    def read(self, request_id: RequestId) -> None:
        if not self._ids:
            self._none = anyio.Event()  # an anyio Event cannot be cleared: a new one for the next wait
        self._ids[request_id] += 1

    def settle(self, request_id: RequestId) -> None:
        if self._ids[request_id] > 1:
            self._ids[request_id] -= 1
        else:
            self._ids.pop(request_id, None)
        if not self._ids:
            self._none.set()

    def hook(self, request_id: RequestId) -> Callable[[], Awaitable[None]]:
        """What the server calls when it settles this request without an answer."""

        async def settled_unanswered() -> None:
            self.settle(request_id)

        return settled_unanswered

    async def all_answered(self) -> None:
        await self._none.wait()


class Answers:
    """The server's write stream: each message goes on to the stdout writer, and a response settles its request
    once the writer has taken it (the writer finishes what it has taken before the transport ends)."""

    def __init__(self, stream: MemoryObjectSendStream[SessionMessage], outstanding: Outstanding) -> None:
        self._stream = stream
        self._outstanding = outstanding

    async def send(self, item: SessionMessage, /) -> None:
        await self._stream.send(item)
        message = item.message
        if isinstance(message, JSONRPCResponse | JSONRPCError) and message.id is not None:
            self._outstanding.settle(message.id)

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def __aenter__(self) -> Answers:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc_val: BaseException | None,
                        exc_tb: TracebackType | None) -> None:
        await self.aclose()
