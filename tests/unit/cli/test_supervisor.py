"""The pure parts of ``leveret serve --workers``: stable node names, and the settings a
worker is handed (``config.to_document`` / ``from_document``)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import pytest

from leveret.cli.supervisor import Supervisor, node_names
from leveret.config import ConfigError, Settings, from_document, load, to_document

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.pure_only


def test_node_names_number_the_local_part_and_keep_the_names_already_chosen() -> None:
    assert node_names("leveret@host", 3, []) == [
        "leveret-1@host",
        "leveret-2@host",
        "leveret-3@host",
    ]
    assert node_names("rabbit", 2, []) == ["rabbit-1", "rabbit-2"]
    # A restart keeps the names in workers.json (the host may have been renamed since);
    # more workers get new names, fewer keep the first ones.
    known = ["leveret-1@old", "leveret-2@old"]
    assert node_names("leveret@new", 3, known) == [*known, "leveret-3@new"]
    assert node_names("leveret@new", 1, known) == ["leveret-1@old"]
    assert len(set(node_names("a@h", 4, ["a-2@h"]))) == 4


def test_a_workers_settings_survive_the_trip_through_json() -> None:
    settings = dataclasses.replace(
        load(environ={}),
        etcd=("http://127.0.0.1:2379",),
        loopback_users=(),
        memory_high_watermark=None,
        reuse_port=True,
        node_name="leveret-2@h",
    )
    assert from_document(to_document(settings)) == settings
    assert from_document(to_document(Settings())) == Settings()


def test_workers_is_bounded() -> None:
    assert load(environ={"LEVERET_WORKERS": "4"}).workers == 4
    for bad in ("0", "257"):
        with pytest.raises(ConfigError, match="workers must be from 1 to 256"):
            load(environ={"LEVERET_WORKERS": bad})


def test_every_worker_is_handed_the_links_tls_settings(tmp_path: Path) -> None:
    settings = load(
        environ={
            "LEVERET_DATA_DIR": str(tmp_path),
            "LEVERET_WORKERS": "2",
            "LEVERET_CLUSTER_TLS_CERTFILE": "/etc/leveret/node.pem",
            "LEVERET_CLUSTER_TLS_KEYFILE": "/etc/leveret/node.key",
            "LEVERET_CLUSTER_TLS_CACERTFILE": "/etc/leveret/ca.pem",
        }
    )
    supervisor = Supervisor(settings)
    for index in (1, 2):
        worker = from_document(to_document(supervisor._worker_settings(index, f"n-{index}@h")))
        assert worker.cluster_tls_certfile == "/etc/leveret/node.pem"
        assert worker.cluster_tls_keyfile == "/etc/leveret/node.key"
        assert worker.cluster_tls_cacertfile == "/etc/leveret/ca.pem"
        assert worker.cluster_tls_verify_peer is True
        assert worker.workers == 1
