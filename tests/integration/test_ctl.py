"""``leveret ctl`` end to end against a broker process: rabbitmqctl's verbs, what survives
``kill -9``, a RabbitMQ definitions export's users logging in, vhost deletion, bad input."""

from __future__ import annotations

import json
import os
import signal
import stat
from pathlib import Path

import pika
import pika.exceptions
import pytest

from tests.integration.ctl_support import ctl, login, new_data_dir, ok, start

# Left out of the compiled pass (scripts/test): leveret ctl, not the broker's compiled core.
pytestmark = [pytest.mark.interop, pytest.mark.leveret_only, pytest.mark.pure_only]

RABBITMQ_EXPORT = Path(__file__).resolve().parents[1] / "data" / "rabbitmq-3.10.8-definitions.json"


def test_users_permissions_and_vhosts() -> None:
    data = new_data_dir()
    broker = start(data)
    try:
        ok(data, "await_startup", "--timeout", "10")
        assert "Adding user" in ok(data, "add_user", "app", "s3cret")
        ok(data, "add_vhost", "apps", "--description", "the apps", "--tags", "a,b",
           "--default-queue-type", "quorum")  # fmt: skip
        ok(data, "set_permissions", "-p", "apps", "app", "^app\\.", ".*", ".*")
        ok(data, "set_user_tags", "app", "monitoring", "management")
        assert ok(data, "list_users", "-q").splitlines() == [
            "user\ttags",
            "app\t[monitoring, management]",
            "guest\t[administrator]",
        ]
        users = json.loads(ok(data, "list_users", "--formatter", "json"))
        assert {"user": "app", "tags": ["monitoring", "management"]} in users
        vhosts = json.loads(ok(data, "list_vhosts", "--formatter", "json"))
        assert {
            "name": "apps",
            "description": "the apps",
            "tags": ["a", "b"],
            "default_queue_type": "quorum",
        } in vhosts
        assert ok(data, "list_vhosts", "-q", "name", "description").splitlines() == [
            "name\tdescription",
            "/\tDefault virtual host",
            "apps\tthe apps",
        ]
        assert ok(data, "list_permissions", "-q", "-p", "apps").splitlines() == [
            "user\tconfigure\twrite\tread",
            "app\t^app\\.\t.*\t.*",
        ]
        assert ok(data, "list_user_permissions", "-q", "app").splitlines()[1] == (
            "apps\t^app\\.\t.*\t.*"
        )
        # The new user logs in to the vhost it has permissions in, and only there.
        conn = login(broker, "app", "s3cret", "apps")
        conn.channel().queue_declare("app.q")
        conn.close()
        with pytest.raises(pika.exceptions.ProbableAccessDeniedError):
            login(broker, "app", "s3cret", "/")
        # authenticate_user checks the password only.
        assert "Success" in ok(data, "authenticate_user", "app", "s3cret")
        bad = ctl(data, "authenticate_user", "app", "nope")
        assert bad.returncode == 65
        assert "invalid credentials" in bad.stderr
        # A password from standard input, as rabbitmqctl reads it.
        ok(data, "change_password", "app", stdin="n3w\n")
        with pytest.raises(pika.exceptions.ProbableAuthenticationError):
            login(broker, "app", "s3cret", "apps")
        login(broker, "app", "n3w", "apps").close()
        ok(data, "clear_password", "app")
        with pytest.raises(pika.exceptions.ProbableAuthenticationError):
            login(broker, "app", "n3w", "apps")
        # Topic permissions.
        ok(data, "set_topic_permissions", "-p", "apps", "app", "amq.topic", "^{username}", ".*")
        assert ok(data, "list_topic_permissions", "-q", "-p", "apps").splitlines() == [
            "user\texchange\twrite\tread",
            "app\tamq.topic\t^{username}\t.*",
        ]
        assert ok(data, "list_user_topic_permissions", "-q", "app").splitlines()[1] == (
            "apps\tamq.topic\t^{username}\t.*"
        )
        ok(data, "clear_topic_permissions", "-p", "apps", "app", "amq.topic")
        assert ok(data, "list_topic_permissions", "-q", "-p", "apps").splitlines() == [
            "user\texchange\twrite\tread"
        ]
        # Limits.
        ok(data, "set_vhost_limits", "-p", "apps", '{"max-connections": 5, "max-queues": 9}')
        assert ok(data, "list_vhost_limits", "-q", "-p", "apps").strip() == (
            '{"max-connections":5,"max-queues":9}'
        )
        assert "apps\t" in ok(data, "list_vhost_limits", "-q", "--global")
        ok(data, "clear_vhost_limits", "-p", "apps")
        assert ok(data, "list_vhost_limits", "-q", "-p", "apps").strip() == "{}"
        ok(data, "set_user_limits", "app", '{"max-channels": 3}')
        assert ok(data, "list_user_limits", "-q", "--user", "app").strip() == ('{"max-channels":3}')
        ok(data, "clear_user_limits", "app", "all")
        assert ok(data, "list_user_limits", "-q", "--user", "app").strip() == "{}"
        # Permissions go; then the user.
        ok(data, "clear_permissions", "-p", "apps", "app")
        ok(data, "delete_user", "app")
        assert "app" not in ok(data, "list_users", "-q")
        status = json.loads(ok(data, "status", "--formatter", "json"))
        assert status["pid"] == broker.process.pid if broker.process else False
        assert f"amqp://127.0.0.1:{broker.port}" in status["listeners"]
    finally:
        broker.stop()


def test_everything_survives_kill_9() -> None:
    data = new_data_dir()
    broker = start(data)
    try:
        ok(data, "add_user", "keeper", "pw")
        ok(data, "add_vhost", "kept", "--description", "survives")
        ok(data, "set_permissions", "-p", "kept", "keeper", ".*", ".*", ".*")
        ok(data, "set_topic_permissions", "-p", "kept", "keeper", "amq.topic", "^a", "^b")
        ok(data, "set_vhost_limits", "-p", "kept", '{"max-queues": 7}')
        ok(data, "set_user_limits", "keeper", '{"max-connections": 2}')
        ok(data, "set_user_tags", "keeper", "policymaker")
        ok(data, "delete_user", "guest")  # RabbitMQ's default user must not come back
        before = ok(data, "export_definitions", "-")
    finally:
        assert broker.stop(signal.SIGKILL) == -signal.SIGKILL
    broker = start(data)
    try:
        assert ok(data, "export_definitions", "-") == before
        conn = login(broker, "keeper", "pw", "kept")
        conn.channel().queue_declare("q", durable=True)
        conn.close()
        with pytest.raises(pika.exceptions.ProbableAuthenticationError):
            login(broker, "guest", "guest")
    finally:
        broker.stop()


def test_rabbitmq_export_users_log_in() -> None:
    """The users of a RabbitMQ 3.10.8 export (tests/data) log in with their passwords:
    SHA-256, SHA-512 and MD5 hashes as RabbitMQ made them."""
    data = new_data_dir()
    broker = start(data)
    try:
        out = ok(data, "import_definitions", str(RABBITMQ_EXPORT))
        assert "Importing definitions" in out
        for user, password in [
            ("lv_exp_sha256", "secret-256"),
            ("lv_exp_sha512", "secret-512"),
            ("lv_exp_md5", "secret-md5"),
        ]:
            conn = login(broker, user, password, "lv_exp")
            assert conn.is_open
            conn.close()
            with pytest.raises(pika.exceptions.ProbableAuthenticationError):
                login(broker, user, password + "!", "lv_exp")
        with pytest.raises(pika.exceptions.ProbableAuthenticationError):
            login(broker, "lv_exp_nopw", "", "lv_exp")
        log = broker.log_text()
        assert "secret-" not in log
        assert "login refused for user 'lv_exp_sha256': bad password" in log
    finally:
        broker.stop()


def test_delete_vhost_closes_its_connections_and_removes_its_contents() -> None:
    data = new_data_dir()
    broker = start(data)
    try:
        ok(data, "add_vhost", "doomed")
        ok(data, "set_permissions", "-p", "doomed", "guest", ".*", ".*", ".*")
        conn = login(broker, "guest", "guest", "doomed")
        ch = conn.channel()
        ch.queue_declare("dq", durable=True)
        ch.exchange_declare("dx", "fanout", durable=True)
        ch.queue_bind("dq", "dx")
        ch.confirm_delivery()
        for i in range(50):
            ch.basic_publish("dx", "", b"m%d" % i, pika.BasicProperties(delivery_mode=2))
        other = login(broker, "guest", "guest", "/")
        ok(data, "delete_vhost", "doomed")
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
            conn.process_data_events(5)  # the close arrives at once; pika raises on it
        assert info.value.reply_code == 320
        assert info.value.reply_text == "CONNECTION_FORCED - vhost 'doomed' is deleted"
        assert other.is_open  # connections to other vhosts stay
        other.close()
        with pytest.raises(pika.exceptions.ProbableAccessDeniedError):
            login(broker, "guest", "guest", "doomed")
    finally:
        broker.stop()
    broker = start(data)
    try:
        assert "recovered 0 exchanges, 0 queues, 0 bindings and 0 messages" in broker.log_text()
        ok(data, "add_vhost", "doomed")
        ok(data, "set_permissions", "-p", "doomed", "guest", ".*", ".*", ".*")
        again = login(broker, "guest", "guest", "doomed")
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
            again.channel().queue_declare("dq", passive=True)
        assert closed.value.reply_code == 404
        again.close()
    finally:
        broker.stop()


def test_bad_input_gets_a_message_and_an_exit_code() -> None:
    data = new_data_dir()
    # No broker yet: unavailable.
    down = ctl(data, "list_users")
    assert down.returncode == 69
    assert "no broker is running" in down.stderr
    broker = start(data)
    try:
        cases = [
            (["no_such_verb"], 64, "invalid choice"),
            (["add_user"], 64, "required"),
            (["set_permissions", "guest", ".*"], 64, "required"),
            (["delete_user", "ghost"], 67, 'User "ghost" does not exist'),
            (["add_user", "guest", "x"], 70, 'User "guest" already exists'),
            (["set_permissions", "-p", "nope", "guest", ".*", ".*", ".*"], 69, "'nope'"),
            (["set_permissions", "guest", "(", ".*", ".*"], 65, "regular expression '('"),
            (["set_vhost_limits", "{"], 65, "not valid JSON"),
            (["set_user_limits", "guest", '{"max-queues": 1}'], 65, "unrecognised limits"),
            (["add_vhost", ""], 65, "must not be empty"),
            (["import_definitions", "/nonexistent.json"], 66, "cannot read"),
            (["reload_tls"], 65, "TLS is not configured"),
        ]
        for args, code, message in cases:
            result = ctl(data, *args)
            assert result.returncode == code, (args, result.stderr)
            assert message in result.stderr, (args, result.stderr)
            assert "Traceback" not in result.stderr
        sock = data / "ctl.sock"
        assert stat.S_IMODE(os.stat(sock).st_mode) == 0o600
    finally:
        broker.stop()
    assert not (data / "ctl.sock").exists()
