"""The classes only AMQP 0-8 and 0-9 have beyond 0-9-1's, each in its own module, imported
here so that their handlers are registered in ``handlers.LEGACY_HANDLERS`` before the
legacy front end handles a method: ``file`` (``filexfer.py``), ``stream``
(``ratestream.py``), 0-9's ``message`` (``references.py``), ``dtx`` (``dtx.py``) and
``tunnel`` (``tunnel.py``). Imported by ``connection.py``.
"""

from __future__ import annotations

from leveret.server.legacy import dtx, filexfer, ratestream, references, tunnel

__all__ = ["dtx", "filexfer", "ratestream", "references", "tunnel"]
