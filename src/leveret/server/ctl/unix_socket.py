"""The local control channel ``leveret ctl`` speaks to: a Unix socket in the data
directory, guarded as rabbitmqctl's cookie guards a node, by the file system: the socket is
made mode 0600 in a directory only the broker's user may enter, and a connecting process
must also run as that user (or root), checked with SO_PEERCRED where the system has it.

One request per connection: a JSON object on one line, ``{"verb": ..., "args": {...}}``;
one answer line, ``{"ok": bool, "result": ..., "error": str, "code": int}`` (``code`` is
the exit status rabbitmqctl would use). ``server/server.py`` starts it after the
listeners; ``server/ctl/admin.py`` answers; ``cli/ctl.py`` is the client.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import struct
from typing import TYPE_CHECKING

from leveret.server.ctl.admin import Reply

if TYPE_CHECKING:
    from pathlib import Path

    from leveret.server.ctl.admin import Admin

log = logging.getLogger("leveret.admin")

SOCKET_NAME = "ctl.sock"
# Large enough for a definitions file of many thousands of users.
MAX_REQUEST = 64 << 20
# sockaddr_un's sun_path: 108 bytes on Linux, including the terminating NUL.
MAX_PATH = 107


class ControlChannelError(Exception):
    """The control socket cannot be made (the broker runs without it and says so)."""


def socket_path(data_dir: Path) -> Path:
    return data_dir / SOCKET_NAME


def _peer_uid(sock: socket.socket | None) -> int | None:
    if sock is None or not hasattr(socket, "SO_PEERCRED"):
        return None
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return int(uid)


class ControlChannel:
    def __init__(self, admin: Admin, data_dir: Path) -> None:
        self.admin = admin
        self.path = socket_path(data_dir)
        self.server: asyncio.AbstractServer | None = None

    async def start(self) -> None:
        if len(str(self.path).encode()) > MAX_PATH:
            raise ControlChannelError(
                f"data directory path too long for a Unix socket: {self.path}"
            )
        # The data directory's lock is ours: a socket left by a killed broker is stale.
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        old_umask = os.umask(0o177)
        try:
            self.server = await asyncio.start_unix_server(
                self._serve, path=str(self.path), limit=MAX_REQUEST
            )
        except OSError as exc:
            raise ControlChannelError(f"cannot listen on {self.path}: {exc.strerror}") from None
        finally:
            os.umask(old_umask)
        os.chmod(self.path, 0o600)

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()
            self.server = None
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            uid = _peer_uid(writer.get_extra_info("socket"))
            if uid is not None and uid not in (0, os.getuid()):
                reply = Reply(False, error="permission denied", exit_code=77)
            else:
                reply = await self._answer(await reader.readline())
            writer.write(json.dumps(reply.to_json()).encode() + b"\n")
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass  # the client went away or sent too much: nothing to answer
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def _answer(self, line: bytes) -> Reply:
        try:
            request = json.loads(line)
        except ValueError:
            return Reply(False, error="request is not JSON", exit_code=64)
        if not isinstance(request, dict) or not isinstance(request.get("verb"), str):
            return Reply(False, error="request must be an object with a verb", exit_code=64)
        args = request.get("args") or {}
        if not isinstance(args, dict):
            return Reply(False, error="args must be an object", exit_code=64)
        verb = request["verb"]
        reply = await self.admin.handle(verb, args)
        if verb not in ("status",) and not verb.startswith("list_"):
            log.info(
                "ctl %s: %s",
                verb,
                "done" if reply.ok else f"refused: {reply.error}",
            )
        return reply
