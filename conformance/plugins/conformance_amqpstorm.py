"""pytest plugin for amqpstorm's functional tests: connect to the harness's broker port.

The tests call ``Connection(HOST, USERNAME, PASSWORD)`` and so always use port 5672; the
harness's Leveret listens on a free port instead. This plugin (``-p conformance_amqpstorm``)
makes ``CONFORMANCE_AMQP_PORT`` the default port of ``amqpstorm.Connection``; host, user,
password and the management URL come from amqpstorm's own ``AMQP_*`` variables.
"""

from __future__ import annotations

import functools
import os
from typing import Any


def pytest_configure(config: Any) -> None:
    port = os.environ.get("CONFORMANCE_AMQP_PORT")
    if not port:
        return
    import amqpstorm.connection

    cls = amqpstorm.connection.Connection
    original = cls.__init__

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if len(args) < 4:  # hostname, username, password, port
            kwargs.setdefault("port", int(port))
        original(self, *args, **kwargs)

    cls.__init__ = __init__  # type: ignore[method-assign]
