"""Leveret: an AMQP message broker written in Python."""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"
