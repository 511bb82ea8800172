"""AMQP 1.0, sans-IO: the type system, the described types generated from the spec XML.

Import the codec through this package; ``_generated`` is private.
"""

from __future__ import annotations

from leveret.protocol.amqp10._generated.composites import *  # noqa: F403
from leveret.protocol.amqp10._generated.definitions import *  # noqa: F403
