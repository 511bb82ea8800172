"""The broker's AMQP/Fast 0.8a2 front end (RFC 006): ``protocol/amqpfast``'s server machine
mapped onto the core. ``server/frontend.py`` picks it from the two-octet initiation."""

from __future__ import annotations

from leveret.server.amqpfast.connection import FastConnection

__all__ = ["FastConnection"]
