"""The auth registry on disk: ``data_dir/auth.json``, rewritten whole and atomically on
every change, read at boot. The server imports it (``server/server.py`` at boot,
``server/ctl/admin.py`` after each change).

Why a file of its own and not records in ``defs.log``: an operator's change must be on disk
before ``leveret ctl`` says it is done, while ``defs.log`` is written by the store's group
commit off the loop and compacted at boot; the auth state is small (a file of a few
kilobytes per hundred users) and changes rarely, so rewriting it costs nothing that
matters; and it holds password hashes, so it is kept readable by the broker's user only
(mode 0600), apart from data any backup tool may read. The write is the usual atomic
replace: a temporary file in the same directory, fsync, rename over the old one, fsync of
the directory. A crash at any point leaves the old file or the new one, never a mix; a
``kill -9`` after ``save`` returned loses nothing.

The format is RabbitMQ's definitions (``auth.definitions``) plus a ``format`` marker.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from leveret.auth.definitions import export_definitions, load_store
from leveret.auth.users import AdminError, UserStore
from leveret.store.files import read_document, replace_durably

if TYPE_CHECKING:
    from pathlib import Path

AUTH_FILE = "auth.json"
FORMAT = "leveret-auth 1"


class AuthFileError(Exception):
    """auth.json cannot be read or used; the broker refuses to start (never silently
    starts with a default user instead of the operator's users)."""


def snapshot(store: UserStore) -> dict[str, Any]:
    return {"format": FORMAT, **export_definitions(store)}


def save(path: Path, doc: dict[str, Any]) -> None:
    """Replace ``path`` by ``doc`` atomically and durably."""
    replace_durably(path, (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode())


def load(path: Path, store: UserStore) -> bool:
    """Fill ``store`` from ``path``; False when there is no file yet (a new data dir)."""
    doc = read_document(path, FORMAT, "a Leveret auth file", AuthFileError)
    if doc is None:
        return False
    try:
        load_store(store, doc)
    except AdminError as exc:
        raise AuthFileError(f"{path}: {exc}") from None
    return True
