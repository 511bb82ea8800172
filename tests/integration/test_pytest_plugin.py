"""Leveret's pytest plugin (``leveret.testing.pytest_plugin``), tested with pytest's own
``pytester``: each test writes a small test suite, runs pytest on it (in this process, or in
a fresh one to prove the entry point), and reads the outcome.

What it proves: the fixtures come from the installed entry point; each test gets a fresh
vhost and one broker serves a module; ``advance`` fires message TTLs (per queue and per
message) with dead-lettering (each hop at its own time), ``x-expires``, consumer timeouts,
stream retention by age, heartbeats (sent and missed), the refused-login delay and any
deadline in the model's ``Timers`` (the path scheduled messages take); settings per module;
restarts (the clock, wall clock included, keeps its time); and every example of
``docs/testing.md`` passes as written (pika, aio-pika, kombu, the Celery worker fixture).

The inner runs use ``-W error``: a warning (an unclosed socket, a thread's exception) fails
them.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

# pytester's in-process runs forget every module first imported during a test; imported
# here, the broker and the clients the in-process runs use are imported once, not once per
# run. (Classes re-imported under the same name are other classes: kombu's lazy imports
# break on that, which is one reason the documentation's examples run in a process of
# their own.)
for _module in ("leveret.assembly", "leveret.testing.embedded", "pika", "amqp"):
    importlib.import_module(_module)

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "testing.md"

# Left out of the compiled pass (scripts/test): the pytest plugin's fixtures and clock.
pytestmark = [pytest.mark.leveret_only, pytest.mark.pure_only]

# Inner runs: warnings are errors, no cache files; Celery's and kombu's own deprecations
# are theirs (the project's pytest configuration ignores them the same way).
INNER_ARGS = (
    "-p",
    "no:cacheprovider",
    "-W",
    "error",
    "-W",
    "ignore::DeprecationWarning:celery",
    "-W",
    "ignore::DeprecationWarning:kombu",
)


def run_inner(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest(*INNER_ARGS, *args)


def doc_examples() -> dict[str, str]:
    """The complete files of docs/testing.md: python blocks whose first line names them."""
    text = DOCS.read_text(encoding="utf-8")
    files = {}
    for block in re.findall(r"```python\n(.*?)```", text, re.DOTALL):
        first = block.split("\n", 1)[0]
        match = re.fullmatch(r"# ((?:test_\w+|conftest)\.py)", first)
        if match:
            files[match.group(1)] = block
    return files


def test_the_fixtures_come_from_the_installed_entry_point(pytester: pytest.Pytester) -> None:
    """A fresh pytest process, no conftest: installing Leveret is all it takes."""
    pytester.makepyfile(
        test_roundtrip="""
        import pika

        def test_the_broker_is_not_rewritten_by_pytest(leveret_broker):
            import leveret.model.queues.classic
            assert "@py_builtins" not in vars(leveret.model.queues.classic)

        def test_roundtrip(leveret_broker, amqp_url):
            assert amqp_url.startswith(f"amqp://guest:guest@127.0.0.1:{leveret_broker.port}/")
            connection = pika.BlockingConnection(pika.URLParameters(amqp_url))
            channel = connection.channel()
            channel.queue_declare("hello")
            channel.basic_publish("", "hello", b"world")
            assert channel.basic_get("hello", auto_ack=True)[2] == b"world"
            connection.close()
        """
    )
    result = pytester.runpytest_subprocess(*INNER_ARGS, "--fixtures")
    result.stdout.fnmatch_lines(
        [
            "*fixtures defined from leveret.testing.pytest_plugin*",
            "leveret_settings [[]module scope[]]*",
            "leveret_broker [[]module scope[]]*",
            "leveret_vhost -*",
            "amqp_url -*",
        ]
    )
    result = pytester.runpytest_subprocess(*INNER_ARGS)
    result.assert_outcomes(passed=2)


def test_each_test_gets_a_fresh_vhost_and_the_module_one_broker(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        test_isolation="""
        import pika
        import pytest

        SEEN = []
        LEFT_OPEN = []

        def open_channel(url):
            connection = pika.BlockingConnection(pika.URLParameters(url))
            return connection, connection.channel()

        def test_first(leveret_broker, leveret_vhost, amqp_url):
            SEEN.append((leveret_broker.port, leveret_vhost))
            connection, channel = open_channel(amqp_url)
            channel.queue_declare("shared.name", durable=True)
            channel.exchange_declare("events", "topic")
            channel.basic_publish("", "shared.name", b"left behind")
            LEFT_OPEN.append(connection)  # left open: the vhost's deletion closes it

        def test_second(leveret_broker, leveret_vhost, amqp_url):
            SEEN.append((leveret_broker.port, leveret_vhost))
            connection, channel = open_channel(amqp_url)
            declared = channel.queue_declare("shared.name", durable=True)
            assert declared.method.message_count == 0
            channel.exchange_declare("events", "direct")  # another type: no clash
            names = [v["name"] for v in leveret_broker.admin("list_vhosts")]
            assert SEEN[0][1] not in names
            assert leveret_vhost in names
            vhosts = {c["vhost"] for c in leveret_broker.admin("list_connections")}
            assert vhosts == {leveret_vhost}
            connection.close()

        def test_same_broker_other_vhosts():
            assert SEEN[0][0] == SEEN[1][0]
            assert SEEN[0][1] != SEEN[1][1]

        def test_the_connection_left_open_was_closed():
            with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
                LEFT_OPEN[0].process_data_events(time_limit=5)
            assert closed.value.reply_code == 320
        """,
        test_other_module="""
        def test_own_broker(leveret_broker):
            from test_isolation import SEEN
            assert leveret_broker.port != SEEN[0][0]
            assert leveret_broker.start_seconds < 10
        """,
    )
    run_inner(pytester).assert_outcomes(passed=5)


def test_advance_plays_a_dead_letter_chain_at_its_own_times(pytester: pytest.Pytester) -> None:
    """Two TTL hops of 10 and 20 minutes within one advance: each expires at its own time
    (the x-death times are the broker's clock: 10 minutes apart), and a message published
    without confirms just before the advance is in place before the clock moves."""
    pytester.makepyfile(
        test_chain="""
        import pika

        def test_chain(leveret_broker, leveret_vhost, amqp_url):
            connection = pika.BlockingConnection(pika.URLParameters(amqp_url))
            channel = connection.channel()
            for name, ttl, then in (("a", 600_000, "b"), ("b", 1_200_000, "done")):
                channel.queue_declare(name, arguments={
                    "x-message-ttl": ttl,
                    "x-dead-letter-exchange": "",
                    "x-dead-letter-routing-key": then,
                })
            channel.queue_declare("done")
            channel.basic_publish("", "a", b"m")  # no confirm: the advance comes after it
            start = leveret_broker.time()

            leveret_broker.advance(29 * 60)
            assert channel.basic_get("done") == (None, None, None)
            assert leveret_broker.queue_length("b", leveret_vhost) == 1

            leveret_broker.advance(60)
            _, properties, body = channel.basic_get("done", auto_ack=True)
            assert body == b"m"
            deaths = {d["queue"]: d["time"] for d in properties.headers["x-death"]}
            assert (deaths["b"] - deaths["a"]).total_seconds() in (1199, 1200, 1201)
            assert 30 * 60 <= leveret_broker.time() - start < 30 * 60 + 5
            connection.close()
        """
    )
    run_inner(pytester).assert_outcomes(passed=1)


def test_advance_fires_expiries_consumer_timeouts_and_stream_retention(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        test_deadlines="""
        import pika
        import pytest

        def test_x_expires(leveret_broker, amqp_url):
            connection = pika.BlockingConnection(pika.URLParameters(amqp_url))
            channel = connection.channel()
            channel.queue_declare("unused", arguments={"x-expires": 3_600_000})
            leveret_broker.advance(3599)
            channel.queue_declare("unused", passive=True)  # used: the hour starts again
            leveret_broker.advance(3599)
            channel.queue_declare("unused", passive=True)
            leveret_broker.advance(3601)
            with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
                channel.queue_declare("unused", passive=True)
            assert closed.value.reply_code == 404
            connection.close()

        def test_consumer_timeout(leveret_broker, amqp_url):
            connection = pika.BlockingConnection(pika.URLParameters(amqp_url))
            channel = connection.channel()
            channel.queue_declare("jobs")
            channel.basic_publish("", "jobs", b"job")
            taken, cancelled = [], []
            channel.add_on_cancel_callback(cancelled.append)
            channel.basic_consume("jobs", lambda ch, m, p, b: taken.append(m.delivery_tag))
            connection.process_data_events(time_limit=1)
            assert taken == [1]

            leveret_broker.advance(1799)  # RabbitMQ's default: 30 minutes
            connection.process_data_events(time_limit=0.2)
            assert cancelled == []

            leveret_broker.advance(2)
            connection.process_data_events(time_limit=1)
            assert len(cancelled) == 1
            other = connection.channel()
            assert other.queue_declare("jobs", passive=True).method.message_count == 1
            connection.close()

        def test_per_message_ttl(leveret_broker, amqp_url):
            connection = pika.BlockingConnection(pika.URLParameters(amqp_url))
            channel = connection.channel()
            channel.queue_declare("late")
            channel.queue_declare("offers", arguments={
                "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "late",
            })
            # (As in RabbitMQ, a message expires when it reaches the head: the hour first.)
            for body, expiration in ((b"hour", "3600000"), (b"day", "86400000")):
                channel.basic_publish(
                    "", "offers", body, pika.BasicProperties(expiration=expiration)
                )
            leveret_broker.advance(3601)
            assert channel.basic_get("late", auto_ack=True)[2] == b"hour"
            assert channel.basic_get("late") == (None, None, None)
            leveret_broker.advance(86400 - 3600)
            assert channel.basic_get("late", auto_ack=True)[2] == b"day"
            connection.close()

        def test_stream_max_age(leveret_broker, amqp_url):
            connection = pika.BlockingConnection(pika.URLParameters(amqp_url))
            channel = connection.channel()
            channel.confirm_delivery()
            channel.queue_declare("audit", durable=True, arguments={
                "x-queue-type": "stream",
                "x-max-age": "1h",  # (a week would cost 600,000 connection ticks)
                "x-stream-max-segment-size-bytes": 1,  # a segment per message
            })
            for i in range(5):
                channel.basic_publish("", "audit", b"event %d" % i)

            def first_offset():
                declared = channel.queue_declare(
                    "audit", passive=True, arguments={"x-stream-offset": "first"}
                )
                return declared.method.message_count

            leveret_broker.advance(3500)
            assert first_offset() == 0
            leveret_broker.advance(100 + 61)  # an hour old: the segments go
            assert first_offset() == 5
            connection.close()
        """
    )
    run_inner(pytester).assert_outcomes(passed=4)


def test_advance_fires_heartbeats_both_ways(pytester: pytest.Pytester) -> None:
    """A client that negotiated 4 s heartbeats gets the broker's heartbeat once the clock
    passes half an interval (or up to a quarter of it sooner: each connection's phase,
    server/heartbeat_phase.py), and is dropped once it passes two intervals without a
    word."""
    pytester.makepyfile(
        test_heartbeats="""
        import socket

        import amqp
        import pytest

        def test_heartbeats(leveret_broker, leveret_vhost):
            client = amqp.Connection(
                f"{leveret_broker.host}:{leveret_broker.port}",
                virtual_host=leveret_vhost,
                heartbeat=4,
            )
            client.connect()
            assert client.heartbeat == 4

            def frames_within(seconds):
                before = client.bytes_recv
                try:
                    client.drain_events(timeout=seconds)
                except socket.timeout:
                    pass
                return client.bytes_recv - before

            assert frames_within(0.3) == 0  # real time alone: nothing yet
            leveret_broker.advance(2.5)
            # The broker's heartbeat (a second one too when the connection's phase is low
            # and the real time of the drains comes on top).
            assert frames_within(1) in (1, 2)

            leveret_broker.advance(6)  # 8.5 s since the client last spoke
            with pytest.raises(OSError):
                client.drain_events(timeout=5)
            assert leveret_broker.admin("list_connections") == []
            client.collect()
        """
    )
    run_inner(pytester).assert_outcomes(passed=1)


def test_advance_ends_the_refused_login_delay(pytester: pytest.Pytester) -> None:
    """A refused login is answered after 3 s of the broker's time (as RabbitMQ does); with
    the clock advanced the refusal comes at once, in less real time than the delay."""
    pytester.makepyfile(
        test_login="""
        import threading
        import time

        import amqp

        def test_refused_login(leveret_broker, leveret_vhost):
            outcome = []

            def login():
                client = amqp.Connection(
                    f"{leveret_broker.host}:{leveret_broker.port}",
                    userid="guest",
                    password="wrong",
                    virtual_host=leveret_vhost,
                    connect_timeout=10,
                )
                try:
                    client.connect()
                except amqp.exceptions.AccessRefused as exc:
                    outcome.append(exc)
                finally:
                    client.collect()

            began = time.monotonic()
            thread = threading.Thread(target=login)
            thread.start()
            while thread.is_alive() and time.monotonic() - began < 10:
                leveret_broker.advance(0.5)
                thread.join(0.05)
            thread.join(10)
            assert len(outcome) == 1
            assert time.monotonic() - began < 3  # the delay passed on the broker's clock
        """
    )
    run_inner(pytester).assert_outcomes(passed=1)


def test_advance_fires_any_deadline_of_the_model(pytester: pytest.Pytester) -> None:
    """Scheduled messages and every other model deadline go through ``Timers``; one
    scheduled from the test fires during the advance, told the time it was due."""
    pytester.makepyfile(
        test_timers="""
        class Due:
            def __init__(self):
                self.fired = []

            def on_deadline(self, now):
                self.fired.append(now)

        def test_timers(leveret_broker):
            due = Due()
            timers = leveret_broker.call(lambda: leveret_broker.server.broker.timers)
            when = leveret_broker.call(lambda: timers.now) + 7200
            leveret_broker.call(timers.schedule, when, due)
            leveret_broker.advance(7199)
            assert due.fired == []
            leveret_broker.advance(2)
            assert len(due.fired) == 1
            assert when <= due.fired[0] < when + 1
        """
    )
    run_inner(pytester).assert_outcomes(passed=1)


def test_advance_delivers_a_delayed_exchange_message_when_due(pytester: pytest.Pytester) -> None:
    """A message published to an ``x-delayed-message`` exchange with a 30-minute ``x-delay``
    waits while the clock stands still and is routed once the advance passes its due time."""
    pytester.makepyfile(
        test_delayed="""
        import pika

        def test_delayed(leveret_broker, amqp_url):
            connection = pika.BlockingConnection(pika.URLParameters(amqp_url))
            channel = connection.channel()
            channel.confirm_delivery()
            channel.exchange_declare(
                "later", "x-delayed-message", arguments={"x-delayed-type": "direct"}
            )
            channel.queue_declare("jobs")
            channel.queue_bind("jobs", "later", "job")
            channel.basic_publish(
                "later", "job", b"retry",
                pika.BasicProperties(headers={"x-delay": 30 * 60 * 1000}),
            )
            leveret_broker.advance(30 * 60 - 1)
            assert channel.basic_get("jobs") == (None, None, None)
            leveret_broker.advance(2)
            _, _, body = channel.basic_get("jobs", auto_ack=True)
            assert body == b"retry"
            connection.close()
        """
    )
    run_inner(pytester).assert_outcomes(passed=1)


def test_an_exception_on_the_broker_thread_fails_the_test(pytester: pytest.Pytester) -> None:
    """A bug that fires on the broker's thread (here a deadline that raises) is only a log
    line in a broker; in a test it fails the test that was running."""
    pytester.makepyfile(
        test_bug="""
        class Broken:
            def on_deadline(self, now):
                raise RuntimeError("bug in a deadline")

        def test_bug(leveret_broker):
            timers = leveret_broker.call(lambda: leveret_broker.server.broker.timers)
            leveret_broker.call(timers.schedule, leveret_broker.time() + 60, Broken())
            leveret_broker.advance(61)

        def test_next_is_clean(leveret_broker):
            leveret_broker.advance(1)
        """
    )
    result = run_inner(pytester)
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at teardown of test_bug*",
            "*the broker raised an uncaught exception during the test:*",
            "*RuntimeError('bug in a deadline')*",
        ]
    )


def test_settings_per_module(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_settings="""
        import pika
        import pytest

        @pytest.fixture(scope="module")
        def leveret_settings():
            return {"consumer_timeout": 5_000, "vhosts": ["/", "reports"]}

        def test_short_consumer_timeout(leveret_broker, amqp_url):
            connection = pika.BlockingConnection(pika.URLParameters(amqp_url))
            channel = connection.channel()
            channel.queue_declare("jobs")
            channel.basic_publish("", "jobs", b"job")
            cancelled = []
            channel.add_on_cancel_callback(cancelled.append)
            channel.basic_consume("jobs", lambda *args: None)
            connection.process_data_events(time_limit=0.5)
            leveret_broker.advance(6)
            connection.process_data_events(time_limit=1)
            assert len(cancelled) == 1
            connection.close()

        def test_vhosts(leveret_broker):
            connection = pika.BlockingConnection(
                pika.URLParameters(leveret_broker.url("reports"))
            )
            connection.close()
        """,
        test_defaults="""
        def test_defaults(leveret_broker):
            settings = leveret_broker.call(lambda: leveret_broker.server.settings)
            assert settings.consumer_timeout == 1_800_000
            assert not settings.management
            assert leveret_broker.management_port == 0
        """,
        test_management="""
        import pytest
        import requests

        @pytest.fixture(scope="module")
        def leveret_settings():
            return {"management": True}

        def test_http_api(leveret_broker, leveret_vhost):
            assert leveret_broker.management_port
            response = requests.get(
                f"http://127.0.0.1:{leveret_broker.management_port}/api/vhosts",
                auth=("guest", "guest"),
                timeout=10,
            )
            assert response.status_code == 200
            assert leveret_vhost in [v["name"] for v in response.json()]
        """,
    )
    run_inner(pytester).assert_outcomes(passed=4)


def test_restart_keeps_durable_state_the_url_and_the_time(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_restart="""
        import time

        import pika
        import pytest

        def test_restart(leveret_broker, amqp_url):
            connection = pika.BlockingConnection(pika.URLParameters(amqp_url))
            channel = connection.channel()
            channel.confirm_delivery()
            channel.queue_declare("orders", durable=True)
            channel.basic_publish(
                "", "orders", b"order 7", pika.BasicProperties(delivery_mode=2)
            )
            leveret_broker.advance(600)
            before = leveret_broker.time()

            leveret_broker.restart()

            assert leveret_broker.time() >= before
            with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
                connection.process_data_events(time_limit=5)
            assert closed.value.reply_code == 320  # the shutdown's, as on SIGTERM
            connection = pika.BlockingConnection(pika.URLParameters(amqp_url))
            channel = connection.channel()
            assert channel.basic_get("orders", auto_ack=True)[2] == b"order 7"
            connection.close()

        def test_ttl_counts_the_advanced_time_across_a_restart(
            leveret_broker, leveret_vhost, amqp_url
        ):
            connection = pika.BlockingConnection(pika.URLParameters(amqp_url))
            channel = connection.channel()
            channel.confirm_delivery()
            channel.queue_declare("expired", durable=True)
            channel.queue_declare("unpaid", durable=True, arguments={
                "x-message-ttl": 3_600_000,
                "x-dead-letter-exchange": "",
                "x-dead-letter-routing-key": "expired",
            })
            published = leveret_broker.wall_time()
            channel.basic_publish(
                "", "unpaid", b"order 7", pika.BasicProperties(delivery_mode=2)
            )
            leveret_broker.advance(50 * 60)
            channel.basic_publish(
                "", "unpaid", b"order 8", pika.BasicProperties(delivery_mode=2)
            )

            leveret_broker.restart()

            with pytest.raises(pika.exceptions.ConnectionClosedByBroker):
                connection.process_data_events(time_limit=5)
            connection = pika.BlockingConnection(pika.URLParameters(amqp_url))
            channel = connection.channel()
            assert leveret_broker.queue_length("unpaid", leveret_vhost) == 2
            leveret_broker.advance(11 * 60)  # 61 minutes of the broker's time in all
            _, properties, body = channel.basic_get("expired", auto_ack=True)
            assert body == b"order 7"
            # The broker's wall clock kept the advanced time across the restart too (an
            # x-death time is whole seconds; without the advances it would be 11 minutes).
            assert leveret_broker.wall_time() - time.time() >= 61 * 60
            died = properties.headers["x-death"][0]["time"].timestamp()
            assert 59 * 60 < died - published < 62 * 60
            # Published after the first 50 minutes: 11 minutes old, not 61.
            assert leveret_broker.queue_length("unpaid", leveret_vhost) == 1
            leveret_broker.advance(50 * 60)
            assert channel.basic_get("expired", auto_ack=True)[2] == b"order 8"
            connection.close()

        LEFT_OPEN = []

        def test_stopped(leveret_broker):
            # A client left open, not driven, does not hold the stop up for its close-ok.
            LEFT_OPEN.append(pika.BlockingConnection(pika.URLParameters(leveret_broker.url())))
            began = time.monotonic()
            leveret_broker.stop()
            assert time.monotonic() - began < 2
            with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
                LEFT_OPEN[0].process_data_events(time_limit=5)
            assert closed.value.reply_code == 320

        def test_back_again(amqp_url):
            pika.BlockingConnection(pika.URLParameters(amqp_url)).close()
        """
    )
    run_inner(pytester).assert_outcomes(passed=4)


def test_the_documented_examples_pass(pytester: pytest.Pytester) -> None:
    """Every complete file of docs/testing.md, run as a user would run them: together, in
    a pytest process of their own (the Celery example's conftest.py beside the others)."""
    examples = doc_examples()
    assert {"conftest.py", "test_pika_retry.py", "test_celery_retry.py"} <= set(examples)
    for name, code in examples.items():
        pytester.path.joinpath(name).write_text(code, encoding="utf-8")
    tests = sorted(name for name in examples if name.startswith("test_"))
    result = pytester.runpytest_subprocess(*INNER_ARGS, "-v")
    result.stdout.fnmatch_lines_random([f"{name}::* PASSED*" for name in tests])
    result.assert_outcomes(passed=len(tests))
