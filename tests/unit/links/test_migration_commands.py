"""``python -m leveret.links.migration``: the shovels of docs/migration.md from a RabbitMQ
definitions file."""

from __future__ import annotations

import json
import shlex
from typing import TYPE_CHECKING

import pytest

from leveret.links.migration import main, shovel_commands
from leveret.links.shovel_config import validate

if TYPE_CHECKING:
    from pathlib import Path

# Left out of the compiled pass (scripts/test): leveret.links is not compiled.
pytestmark = pytest.mark.pure_only

DEFINITIONS = {
    "queues": [
        {"name": "orders", "vhost": "shop", "durable": True, "arguments": {}},
        {"name": "mail", "vhost": "/", "durable": True, "arguments": {}},
        {"name": "scratch", "vhost": "/", "durable": False, "arguments": {}},
    ]
}


def test_one_valid_on_confirm_shovel_per_durable_queue() -> None:
    commands = shovel_commands(DEFINITIONS, "amqp://admin:s3cret@rabbit:5672/ignored?x=1")
    assert [c[:7] for c in commands] == [
        ["leveret", "ctl", "set_parameter", "-p", "shop", "shovel", "migrate-orders"],
        ["leveret", "ctl", "set_parameter", "-p", "/", "shovel", "migrate-mail"],
    ]
    value = json.loads(commands[0][7])
    validate(value)
    assert value["src-uri"] == "amqp://admin:s3cret@rabbit:5672/shop"
    assert value["dest-uri"] == "amqp://admin@/shop"  # here, as the definitions' user
    assert value["ack-mode"] == "on-confirm"
    assert json.loads(commands[1][7])["src-uri"] == "amqp://admin:s3cret@rabbit:5672/%2F"


def test_options() -> None:
    [command] = shovel_commands(
        DEFINITIONS,
        "amqp://admin:s3cret@rabbit",
        "mover",
        prefetch=50,
        delete_after=True,
        vhosts=["shop"],
    )
    value = json.loads(command[7])
    assert value["dest-uri"] == "amqp://mover@/shop"
    assert value["src-prefetch-count"] == 50
    assert value["src-delete-after"] == "queue-length"


def test_main_prints_commands_a_shell_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "rabbit.json"
    path.write_text(json.dumps(DEFINITIONS))
    assert main([str(path), "amqp://a:b@rabbit", "--vhost", "shop"]) == 0
    [line] = capsys.readouterr().out.splitlines()
    assert shlex.split(line)[:7] == [
        "leveret",
        "ctl",
        "set_parameter",
        "-p",
        "shop",
        "shovel",
        "migrate-orders",
    ]
    assert main([str(tmp_path / "missing.json"), "amqp://rabbit"]) == 65
    assert main([str(path), "amqp://"]) == 65  # RabbitMQ must be named
