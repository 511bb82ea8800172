"""The ``leveret`` command: help, configuration errors, listeners, logging and shutdown.

Everything runs ``python -m leveret`` as a subprocess. Tests that start a broker of their own
are marked ``interop`` and ``leveret_only``; the help and configuration-error tests need no
broker at all. ``LEVERET_*`` variables of the calling environment are not passed on.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Any

import aio_pika
import pika
import pika.exceptions
import pytest

from tests.integration.pika_support import connect_to
from tests.integration.test_robustness import (
    PROTOCOL_HEADER,
    RawClient,
    launch,
    method_frame,
    start_ok,
)
from tests.unit.test_build_info import EXPECT_COMPILED

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

    from tests.integration.test_robustness import OwnBroker

RUN_TIMEOUT = 20.0
# How long a signalled broker may take to exit: its 3 s close grace plus start-up slack.
EXIT_TIMEOUT = 10.0


def leveret(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``python -m leveret *args`` to completion (killed after RUN_TIMEOUT)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("LEVERET_")}
    return subprocess.run(
        [sys.executable, "-m", "leveret", *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        env={**base, **(env or {})},
        check=False,
    )


@contextlib.contextmanager
def launched(*serve_args: str) -> Iterator[OwnBroker]:
    """``launch(*serve_args)``, killed with SIGKILL on the way out whatever the test did to it."""
    broker = launch(*serve_args)
    try:
        yield broker
    finally:
        broker.shutdown(signal.SIGKILL, timeout=5)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def ipv6_loopback_available() -> bool:
    if not socket.has_ipv6:
        return False
    try:
        with socket.socket(socket.AF_INET6) as sock:
            sock.bind(("::1", 0))
    except OSError:
        return False
    return True


def pump_until_closed(conn: Any, timeout: float = 10.0) -> BaseException | None:
    """Process pika I/O until the connection fails; returns the exception (None on timeout)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            conn.process_data_events(time_limit=0.1)
        except pika.exceptions.AMQPError as exc:
            error: BaseException = exc
            return error
    return None


# -- help -------------------------------------------------------------------------------


# pure_only (left out of the compiled pass): the CLI's parsing and settings, which are not
# compiled. The tests that serve connections and stop the broker run in both passes.
@pytest.mark.pure_only
def test_help() -> None:
    result = leveret("--help")
    assert result.returncode == 0, result.stderr
    assert "usage: leveret" in result.stdout
    assert "serve" in result.stdout
    assert result.stderr == ""


@pytest.mark.pure_only
def test_serve_help_lists_every_setting() -> None:
    result = leveret("serve", "--help")
    assert result.returncode == 0, result.stderr
    for flag in (
        "--config",
        "--host",
        "--port",
        "--heartbeat",
        "--frame-max",
        "--channel-max",
        "--max-message-size",
        "--consumer-timeout",
        "--log-level",
    ):
        assert flag in result.stdout
    assert result.stderr == ""


@pytest.mark.pure_only
def test_version() -> None:
    result = leveret("--version")
    assert result.returncode == 0
    assert re.fullmatch(r"leveret \d+\.\d+\.\d+\S*\n", result.stdout)


# -- bad flags and bad configuration: status 2, one clear line, no traceback ------------


@pytest.mark.pure_only
@pytest.mark.parametrize(
    "args",
    [
        ["serve", "--bogus"],
        ["serve", "--port", "abc"],
        ["serve", "--port"],
        ["serve", "--heartbeat", "1.5"],
        ["bogus"],
        [],
    ],
    ids=[
        "unknown-flag",
        "port-not-int",
        "port-missing-value",
        "float-heartbeat",
        "bad-cmd",
        "none",
    ],
)
def test_bad_flag_exits_2(args: list[str]) -> None:
    result = leveret(*args)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    # One clear line, like every other CLI error.
    assert len(lines) == 1, result.stderr
    assert re.match(r"leveret: \S.*\(see 'leveret( serve)? --help'\)$", lines[0]), result.stderr
    assert result.stdout == ""


def _config(tmp_path: Path, text: str) -> str:
    path = tmp_path / "leveret.toml"
    path.write_text(text, encoding="utf-8")
    return str(path)


_BAD_CONFIGS: dict[str, Callable[[Path], tuple[list[str], dict[str, str]]]] = {
    "unknown-key": lambda d: (["--config", _config(d, "[leveret]\nprot = 1\n")], {}),
    "bad-toml": lambda d: (["--config", _config(d, "[leveret\n")], {}),
    "missing-file": lambda d: (["--config", str(d / "missing.toml")], {}),
    "port-not-int-in-file": lambda d: (["--config", _config(d, 'port = "x"\n')], {}),
    "negative-in-file": lambda d: (["--config", _config(d, "heartbeat = -1\n")], {}),
    "port-too-big-flag": lambda d: (["--port", "65536"], {}),
    "negative-port-flag": lambda d: (["--port", "-1"], {}),
    "frame-max-too-small-flag": lambda d: (["--frame-max", "100"], {}),
    "bad-log-level-flag": lambda d: (["--log-level", "verbose"], {}),
    "port-not-int-env": lambda d: ([], {"LEVERET_PORT": "many"}),
    "bad-log-level-env": lambda d: ([], {"LEVERET_LOG_LEVEL": "loud"}),
    "wildcard-cluster-advertise-flag": lambda d: (["--cluster-advertise", "0.0.0.0:25672"], {}),
    "bad-cluster-advertise-port-env": lambda d: ([], {"LEVERET_CLUSTER_ADVERTISE": "h:x"}),
    "wildcard-stream-advertised-host-env": lambda d: (
        [],
        {"LEVERET_STREAM_ADVERTISED_HOST": "0.0.0.0"},
    ),
    "stream-advertised-port-too-big-file": lambda d: (
        ["--config", _config(d, "stream_advertised_port = 70000\n")],
        {},
    ),
    # Bug: a config file that is not UTF-8 escapes load() as UnicodeDecodeError.
    "file-not-utf8": lambda d: (["--config", _latin1(d)], {}),
}


def _latin1(directory: Path) -> str:
    path = directory / "latin1.toml"
    path.write_bytes(b'[leveret]\nhost = "h\xf4te"\n')
    return str(path)


@pytest.mark.pure_only
@pytest.mark.parametrize("case", list(_BAD_CONFIGS))
def test_bad_configuration_exits_2_with_one_line(tmp_path: Path, case: str) -> None:
    args, env = _BAD_CONFIGS[case](tmp_path)
    result = leveret("serve", "--host", "127.0.0.1", *args, env=env)
    assert result.returncode == 2, f"status {result.returncode}: {result.stderr}"
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("leveret: ")
    assert result.stdout == ""


@pytest.mark.pure_only
def test_bad_configuration_message_names_the_problem(tmp_path: Path) -> None:
    path = _config(tmp_path, "[leveret]\nprot = 1\n")
    result = leveret("serve", "--config", path)
    assert result.stderr == f"leveret: config file {path}: unknown setting 'prot'\n"
    result = leveret("serve", "--port", "70000")
    assert result.stderr == "leveret: port must be at most 65535, got 70000\n"
    result = leveret("serve", "--cluster-advertise", "node-b:0")
    assert result.stderr == (
        "leveret: cluster_advertise must be HOST or HOST:PORT (the address the other nodes "
        "dial for this node's inter-node link, not a wildcard), got 'node-b:0'\n"
    )


# -- listening ------------------------------------------------------------------------------


@pytest.mark.pure_only
@pytest.mark.interop
@pytest.mark.leveret_only
def test_port_already_in_use_exits_1() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = leveret("serve", "--host", "127.0.0.1", "--port", str(port))
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"leveret: cannot listen on 127.0.0.1:{port}: ")
    assert "in use" in last.lower()
    assert "listening on" not in result.stderr


def _connect_and_close(broker: OwnBroker, **params: Any) -> Any:
    conn = connect_to(broker.host, broker.port, **params)
    impl_params = conn._impl.params
    conn.close()
    return impl_params


@pytest.mark.pure_only
@pytest.mark.interop
@pytest.mark.leveret_only
def test_config_file_and_environment_take_effect(tmp_path: Path) -> None:
    port = free_port()
    path = _config(
        tmp_path,
        f'[leveret]\nhost = "127.0.0.1"\nport = {port}\nheartbeat = 30\nframe-max = 16384\n',
    )
    broker = launch("--config", path, env={"LEVERET_HEARTBEAT": "7"})
    try:
        assert (broker.host, broker.port) == ("127.0.0.1", port)  # from the file
        params = _connect_and_close(broker)
        assert params.heartbeat == 7  # the environment beats the file
        assert params.frame_max == 16384  # from the file
    finally:
        assert broker.shutdown() == 0


@pytest.mark.pure_only
@pytest.mark.interop
@pytest.mark.leveret_only
def test_flags_beat_environment(tmp_path: Path) -> None:
    path = _config(tmp_path, "[leveret]\nheartbeat = 30\nchannel_max = 5\n")
    broker = launch(
        "--config",
        path,
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--heartbeat",
        "9",
        env={"LEVERET_HEARTBEAT": "7", "LEVERET_CHANNEL_MAX": "6"},
    )
    try:
        conn = connect_to(broker.host, broker.port)
        try:
            assert conn._impl.params.heartbeat == 9
            assert conn._impl.params.channel_max == 6
        finally:
            conn.close()
    finally:
        assert broker.shutdown() == 0


@pytest.mark.interop
@pytest.mark.leveret_only
def test_log_lines_for_listener_and_connections() -> None:
    broker = launch("--host", "127.0.0.1", "--port", "0")
    try:
        first = connect_to(broker.host, broker.port)
        second = connect_to(broker.host, broker.port)
        opened = broker.wait_for_log(r"connection \S+ opened", count=2)
        assert len(opened) == 2, broker.log_text()
        first.close()
        second.close()
        closed = broker.wait_for_log(r"closed connection \S+ \(", count=2)
        assert len(closed) == 2, broker.log_text()
        time.sleep(0.2)  # anything logged twice would show up by now
        log = list(broker.log)
        listening = [line for line in log if "listening on amqp://" in line]
        assert len(listening) == 1, log
        assert f"listening on amqp://127.0.0.1:{broker.port}" in listening[0]
        # The broker says which build runs; the compiled test run must really be compiled.
        build = "compiled (mypyc)" if os.environ.get(EXPECT_COMPILED) else "pure Python"
        assert f"({build}" in listening[0], listening[0]
        peers_opened = sorted(
            m.group(1) for line in log if (m := re.search(r"connection (\S+) opened", line))
        )
        peers_closed = sorted(
            m.group(1) for line in log if (m := re.search(r"closed connection (\S+) \(", line))
        )
        assert len(peers_opened) == 2, log
        assert len(set(peers_opened)) == 2, log
        assert peers_closed == peers_opened, log
        for peer in peers_opened:
            assert peer.startswith("127.0.0.1:")
            assert "user 'guest'" in next(
                line for line in log if f"connection {peer} opened" in line
            )
        assert not any("Traceback" in line for line in log)
    finally:
        assert broker.shutdown() == 0


@pytest.mark.interop
@pytest.mark.leveret_only
@pytest.mark.skipif(not ipv6_loopback_available(), reason="no IPv6 loopback")
def test_ipv6_loopback() -> None:
    broker = launch("--host", "::1", "--port", "0")
    try:
        assert broker.host == "::1"
        assert any(f"listening on amqp://[::1]:{broker.port}" in line for line in broker.log)
        conn = connect_to("::1", broker.port)
        try:
            ch = conn.channel()
            queue = ch.queue_declare("", exclusive=True).method.queue
            ch.basic_publish("", queue, b"over v6")
            assert ch.basic_get(queue, auto_ack=True)[2] == b"over v6"
        finally:
            conn.close()
        assert broker.wait_for_log(r"connection \[::1\]:\d+ opened"), broker.log_text()
    finally:
        assert broker.shutdown() == 0


# -- shutdown -------------------------------------------------------------------------------


@pytest.mark.interop
@pytest.mark.leveret_only
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_closes_connections_with_320_and_exits_0(sig: signal.Signals) -> None:
    with launched("--host", "127.0.0.1", "--port", "0") as broker:
        conn = connect_to(broker.host, broker.port)
        ch = conn.channel()
        ch.queue_declare("", exclusive=True)
        assert broker.process is not None
        started = time.monotonic()
        broker.process.send_signal(sig)
        exc = pump_until_closed(conn)
        assert isinstance(exc, pika.exceptions.ConnectionClosedByBroker), repr(exc)
        assert exc.reply_code == 320  # CONNECTION_FORCED
        assert "shutdown" in exc.reply_text
        assert broker.process.wait(EXIT_TIMEOUT) == 0
        # The client answered close-ok, so there was no need to wait for the grace period.
        assert time.monotonic() - started < 3.0
        log = broker.log_text()
        assert f"received {sig.name}" in log
        assert "Traceback" not in log
        assert "KeyboardInterrupt" not in log
        assert re.search(r"closed connection \S+ \(", log), log


@pytest.mark.interop
@pytest.mark.leveret_only
def test_client_that_never_answers_close_does_not_block_shutdown() -> None:
    with (
        launched("--host", "127.0.0.1", "--port", "0") as broker,
        RawClient(broker.host, broker.port) as silent,
    ):
        silent.handshake()
        silent.open_channel(1)
        conn = connect_to(broker.host, broker.port)
        assert broker.process is not None
        started = time.monotonic()
        broker.process.send_signal(signal.SIGTERM)
        exc = pump_until_closed(conn)
        assert isinstance(exc, pika.exceptions.ConnectionClosedByBroker), repr(exc)
        assert exc.reply_code == 320
        # The silent client is sent connection.close too; it never answers close-ok.
        reply_code, _text, _class, _method = silent.expect_connection_close()
        assert reply_code == 320
        assert broker.process.wait(EXIT_TIMEOUT) == 0
        assert time.monotonic() - started < EXIT_TIMEOUT
        # The broker dropped the socket when it exited.
        assert silent.at_eof(timeout=2.0)


@pytest.mark.interop
@pytest.mark.leveret_only
def test_clients_mid_handshake_do_not_block_shutdown() -> None:
    with (
        launched("--host", "127.0.0.1", "--port", "0") as broker,
        RawClient(broker.host, broker.port) as connected_only,
        RawClient(broker.host, broker.port) as header_only,
        RawClient(broker.host, broker.port) as tuned,
    ):
        header_only.send(PROTOCOL_HEADER)
        header_only.expect(10, 10)
        tuned.send(PROTOCOL_HEADER)
        tuned.expect(10, 10)
        tuned.send(start_ok())
        tuned.expect(10, 30)
        broker.wait_for_log(r"accepted connection", count=3)
        assert broker.process is not None
        broker.process.send_signal(signal.SIGTERM)
        assert broker.process.wait(EXIT_TIMEOUT) == 0
        for client in (connected_only, header_only, tuned):
            assert client.at_eof(timeout=2.0)


@pytest.mark.interop
@pytest.mark.leveret_only
def test_aio_pika_client_is_closed_on_sigterm() -> None:
    with launched("--host", "127.0.0.1", "--port", "0") as broker:

        async def scenario() -> BaseException | None:
            conn = await aio_pika.connect(
                f"amqp://guest:guest@{broker.host}:{broker.port}/%2F", timeout=10
            )
            closed: asyncio.Future[BaseException | None] = (
                asyncio.get_running_loop().create_future()
            )

            def on_close(_sender: object, exc: BaseException | None = None) -> None:
                if not closed.done():
                    closed.set_result(exc)

            conn.close_callbacks.add(on_close)
            assert broker.process is not None
            broker.process.send_signal(signal.SIGTERM)
            return await asyncio.wait_for(closed, 10)

        exc = asyncio.run(scenario())
        assert broker.process is not None
        assert broker.process.wait(EXIT_TIMEOUT) == 0
        assert exc is not None
        assert "320" in repr(exc) or "CONNECTION_FORCED" in repr(exc), repr(exc)


@pytest.mark.interop
@pytest.mark.leveret_only
def test_raw_close_handshake_after_sigterm() -> None:
    """A raw client that does answer close-ok gets its socket closed at once."""
    with (
        launched("--host", "127.0.0.1", "--port", "0") as broker,
        RawClient(broker.host, broker.port) as client,
    ):
        client.handshake()
        assert broker.process is not None
        broker.process.send_signal(signal.SIGTERM)
        reply_code, text, class_id, method_id = client.expect_connection_close()
        assert (reply_code, class_id, method_id) == (320, 0, 0)
        assert text.startswith("CONNECTION_FORCED")
        client.send(method_frame(0, 10, 51))
        started = time.monotonic()
        assert client.at_eof(timeout=3.0)
        assert broker.process.wait(EXIT_TIMEOUT) == 0
        assert time.monotonic() - started < 2.5
