"""A server that sheds load: beyond `limit` requests in flight it answers 503 at once.

Why: the slowest requests of such a server are the ones it refuses, fast. A lab that times only
the answers sees a better p99 the more it refuses; the lab must time every request (its 503s'
latency is in the record) and never crown it on a percentile its refusals could set.

Run: python -m tests.shedding_server PORT LIMIT DELAY_MS (loopback only; stdlib asyncio).
"""

from __future__ import annotations

import asyncio
import sys

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\nok"
SHED = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\n\r\nbusy"


class Shedder:
    def __init__(self, limit: int, delay_s: float) -> None:
        self.limit = limit
        self.delay_s = delay_s
        self.inflight = 0

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Keep-alive: one request at a time per connection, each answered or refused."""
        try:
            while await _request(reader):
                writer.write(await self.answer())
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def answer(self) -> bytes:
        if self.inflight >= self.limit:
            return SHED
        self.inflight += 1
        try:
            await asyncio.sleep(self.delay_s)
        finally:
            self.inflight -= 1
        return OK


async def _request(reader: asyncio.StreamReader) -> bool:
    """Read one request's head (GET: no body); False when the client closed."""
    head = await reader.readuntil(b"\r\n\r\n") if not reader.at_eof() else b""
    return bool(head)


async def main(port: int, limit: int, delay_ms: float) -> None:
    shedder = Shedder(limit, delay_ms / 1000)
    server = await asyncio.start_server(shedder.serve, "127.0.0.1", port, backlog=1024)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])))
