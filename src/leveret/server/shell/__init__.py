"""The front-end shell: one connection's lifecycle written once for every protocol.

- ``shell.py``: ``Shell``, what the asyncio adapter drives (handshake deadline, login and
  vhost open, turns, output pacing, the model clock, confirms, heartbeats, deferrals,
  internal errors) and what a front end asks of it;
- ``contract.py``: ``FrontEnd``, what each protocol's front end implements (its machine
  and the mapping of its events onto the core), with ``ShellContext`` and the factory types;
- ``info.py``: ``ConnectionInfo`` and ``ChannelInfo``, what management, Prometheus and
  ``leveret ctl`` read about a connection.

A deferral's completion is the core's ``leveret.model.completion.Completion``.
"""

from __future__ import annotations

from leveret.server.shell.contract import FrontEnd, ShellContext
from leveret.server.shell.info import CHANNEL_COUNTERS, ChannelInfo, ConnectionInfo
from leveret.server.shell.shell import (
    CLOSE_TIMEOUT,
    HANDSHAKE_TIMEOUT,
    HOLD_BOUND,
    Chooser,
    FrontEndFactory,
    OpenRefused,
    Shell,
)

__all__ = [
    "CHANNEL_COUNTERS",
    "CLOSE_TIMEOUT",
    "HANDSHAKE_TIMEOUT",
    "HOLD_BOUND",
    "ChannelInfo",
    "Chooser",
    "ConnectionInfo",
    "FrontEnd",
    "FrontEndFactory",
    "OpenRefused",
    "Shell",
    "ShellContext",
]
