"""The pure parts of ``leveret serve --workers``: stable node names, and the settings a
worker is handed (``config.to_document`` / ``from_document``)."""

from __future__ import annotations

import dataclasses

import pytest

from leveret.cli.supervisor import node_names
from leveret.config import ConfigError, Settings, from_document, load, to_document

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
