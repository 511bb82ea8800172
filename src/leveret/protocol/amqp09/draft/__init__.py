"""The AMQP 0-9 working draft (major 99, minor 0; the "0-10 preview" Qpid spoke).

Generated from ``spec/0-9-draft`` (vendored as scraped, cleaned by the generator): classes
``connection``, ``session``, ``access``, ``exchange``, ``queue``, ``basic``, ``file``,
``stream``, ``tx``, ``dtx-demarcation``, ``dtx-coordination``, ``tunnel``, ``message``,
``binding`` and ``execution``, the result structs of its queries, and (``fieldtable``) the
draft's own field-table type codes. Sans-IO; a front end imports it.
"""

from __future__ import annotations
