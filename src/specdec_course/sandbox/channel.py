"""The grading process's end of a child's channel: whole messages in multiprocessing's framing (what the child's
`Connection` speaks), read and sent without ever blocking past the waiting check's limit.

    channel = Channel(sock)
    channel.send(b"...", meter)                  # Stalled if the child stops reading before `meter` runs out
    message = channel.recv(meter, 16 << 20)      # Stalled, TooLong or EOFError; never a read that blocks

A `Connection` blocks in `recv_bytes` once a message has begun, and in `send_bytes` while the child does not
read: a child that sends half a message, or asks for a large reply and never reads it, held the whole batch. Here
the socket is non-blocking and every wait asks `meter` (a `meter.Meter`, or anything with `left()` and `active()`)
how long it may still last, a second at a time.
"""

from __future__ import annotations

import select
import socket
import struct

TICK = 1.0  # seconds between looks at the meter while the child is silent
LOOK_EVERY = 256  # messages taken between looks at the meter while the child keeps sending (a flood)


class Stalled(OSError):
    """The child stopped: `partial` when it had sent part of a message (or read part of ours)."""

    def __init__(self, partial: bool):
        super().__init__("part of a message, then nothing" if partial else "nothing")
        self.partial = partial


class TooLong(OSError):
    """A message announced longer than the reader takes: refused before it is read."""


def frame(data: bytes) -> bytes:
    """`data` with multiprocessing's length prefix (4 bytes, or -1 then 8 for 2 GB and more)."""
    if len(data) > 0x7FFFFFFF:
        return struct.pack("!i", -1) + struct.pack("!Q", len(data)) + data
    return struct.pack("!i", len(data)) + data


class Channel:
    def __init__(self, sock: socket.socket):
        sock.setblocking(False)
        self._sock, self._buffer = sock, bytearray()
        self._start = 0  # where the buffer's next message begins: taking one moves it, not the bytes after it
        self._taken = 0

    def send(self, data: bytes, meter) -> None:
        """Send `data` whole; Stalled once `meter` runs out with the child not reading, EOFError if it is gone."""
        view = memoryview(frame(data))
        sent = 0
        while sent < len(view):
            if (left := meter.left()) <= 0:
                raise Stalled(partial=sent > 0)
            if not select.select([], [self._sock], [], min(left, TICK))[1]:
                continue
            try:
                sent += self._sock.send(view[sent:])
            except BlockingIOError:
                continue
            except (BrokenPipeError, ConnectionResetError):
                raise EOFError from None
            meter.active()

    def recv(self, meter, max_bytes: int) -> bytes:
        """The next whole message: Stalled once `meter` runs out first (also while messages keep coming), TooLong past
        `max_bytes`, EOFError when the child closed its end."""
        self._taken += 1
        if self._taken % LOOK_EVERY == 0 and meter.left() <= 0:
            raise Stalled(partial=False)
        while (message := self._take(max_bytes)) is None:
            if (left := meter.left()) <= 0:
                raise Stalled(partial=len(self._buffer) > self._start)
            if not select.select([self._sock], [], [], min(left, TICK))[0]:
                continue
            try:
                chunk = self._sock.recv(1 << 20)
            except BlockingIOError:
                continue
            except ConnectionResetError:
                raise EOFError from None
            if not chunk:
                raise EOFError
            self._buffer += chunk
            meter.active()
        return message

    def close(self) -> None:
        self._sock.close()

    def _take(self, max_bytes: int) -> bytes | None:
        """A whole message off the front of the buffer, if one is there."""
        buffer, at = self._buffer, self._start
        if len(buffer) - at < 4:
            return self._compact()
        [size], start = struct.unpack_from("!i", buffer, at), at + 4
        if size == -1:
            if len(buffer) - at < 12:
                return self._compact()
            [size], start = struct.unpack_from("!Q", buffer, at + 4), at + 12
        if size < 0 or size > max_bytes:
            raise TooLong(f"a message of {size} bytes, more than the {max_bytes} taken")
        if len(buffer) < start + size:
            return self._compact()
        self._start = start + size
        return bytes(buffer[start:start + size])

    def _compact(self) -> None:
        """Drop the messages taken, once no whole one is left (a megabyte of tiny messages is read in one pass)."""
        del self._buffer[:self._start]
        self._start = 0
