"""Unit tests of the benchmark's command lines, publish templates, routing and table."""

from __future__ import annotations

import pytest

from bench import amqp10_load, loadgen, run
from bench.amqp import PublishTemplate, ack_frame
from bench.stats import STAMP, read_stamp
from leveret.protocol.amqp091 import framing
from leveret.protocol.amqp091._generated import methods as m
from leveret.protocol.amqp091._generated.properties import BasicProperties


def test_defaults() -> None:
    cfg = loadgen.parse_args([])
    assert (cfg.producers, cfg.consumers, cfg.size, cfg.queues) == (1, 1, 16, 1)
    assert (cfg.confirm, cfg.prefetch, cfg.autoack, cfg.multi_ack) == (0, 0, False, 1)
    assert cfg.exchange_type == "default"
    assert cfg.broker_pid == []


def test_perftest_flags() -> None:
    cfg = loadgen.parse_args(
        [
            "--producers",
            "10",
            "--consumers",
            "4",
            "--size",
            "1024",
            "--confirm",
            "1000",
            "--persistent",
            "--durable",
            "--prefetch",
            "100",
            "--multi-ack",
            "10",
            "--rate",
            "500",
            "--queues",
            "4",
            "--exchange-type",
            "fanout",
            "--broker-pid",
            "12,34",
            "--pass",
            "secret",
        ]
    )
    assert (cfg.producers, cfg.consumers, cfg.size, cfg.confirm) == (10, 4, 1024, 1000)
    assert cfg.persistent
    assert cfg.durable
    assert (cfg.prefetch, cfg.multi_ack, cfg.rate, cfg.queues) == (100, 10, 500.0, 4)
    assert cfg.exchange_type == "fanout"
    assert cfg.broker_pid == [12, 34]
    assert cfg.password == "secret"


@pytest.mark.parametrize(
    "argv",
    [
        ["--size", "8"],
        ["--multi-ack", "200", "--prefetch", "100"],
        ["--deep", "10", "--consumers", "0"],
        ["--producers", "0"],
        ["--exchange-type", "topic"],
    ],
)
def test_bad_combinations_exit(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as info:
        loadgen.parse_args(argv)
    assert info.value.code == 2


def test_procs_are_capped_by_connections() -> None:
    cfg = loadgen.parse_args(["--pub-procs", "4", "--con-procs", "4", "--consumers", "2"])
    assert (cfg.pub_procs, cfg.con_procs) == (1, 2)


def test_routes_and_split() -> None:
    cfg = loadgen.parse_args(["--queues", "3", "--producers", "5"])
    assert [loadgen.routes(cfg, p) for p in range(5)] == [[0], [1], [2], [0], [1]]
    fan = loadgen.parse_args(["--queues", "3", "--exchange-type", "fanout"])
    assert loadgen.routes(fan, 7) == [0, 1, 2]
    assert loadgen.split(5, 2) == [[0, 2, 4], [1, 3]]
    assert loadgen.split(1, 3) == [[0]]


@pytest.mark.parametrize(("size", "frame_max"), [(16, 131072), (300, 131072), (70000, 4096)])
def test_publish_template_is_a_valid_publish(size: int, frame_max: int) -> None:
    tpl = PublishTemplate(1, "ex", "key", size, persistent=True, frame_max=frame_max)
    wire = tpl.prefix + STAMP.pack(99, 5, 3) + tpl.suffix
    frames = framing.FrameDecoder(frame_max=frame_max).feed(wire)
    assert frames[0][0] == framing.FRAME_METHOD
    method = m.decode_method(frames[0][2])
    assert isinstance(method, m.BasicPublish)
    assert (method.exchange, method.routing_key) == ("ex", "key")
    _cls, body_size, raw = framing.parse_content_header(frames[1][2])
    assert body_size == size
    assert BasicProperties.decode(raw).delivery_mode == 2
    body = b"".join(bytes(f[2]) for f in frames[2:])
    assert len(body) == size
    assert read_stamp(body) == (99, 5, 3)
    assert all(len(f[2]) <= frame_max - 8 for f in frames[2:])


def test_ack_frame_decodes() -> None:
    (frame,) = framing.FrameDecoder().feed(ack_frame(1, 77, multiple=True))
    method = m.decode_method(frame[2])
    assert method == m.BasicAck(delivery_tag=77, multiple=True)


_RUN_ARGS = run.build_parser().parse_args([])


def test_run_scenarios_match_the_issue() -> None:
    assert list(run.SCENARIOS) == list("abcdefghijk")
    for s in run.SCENARIOS.values():
        # every scenario is a valid command line of the tool that runs it
        if s.amqp10:
            amqp10_load.build_parser().parse_args([*run.scenario_args(s, _RUN_ARGS), *s.flags])
        else:
            loadgen.parse_args([*s.flags, *s.extra])
    assert [k for k, s in run.SCENARIOS.items() if s.amqp10] == ["j", "k"]
    assert run.go_flags(["--size", "16", "--autoack"]) == ["-size", "16", "-autoack"]


def test_render_table() -> None:
    def result(consumed: float, p99_us: int, ok: bool = True) -> dict[str, object]:
        return {
            "ok": ok,
            "rates": {"consumed": consumed, "published": consumed, "confirmed": 0.0},
            "latency_us": {"p50": 100, "p99": p99_us},
            "window_s": 10.0,
            "cpu": {"broker_cpu_s": 5.0, "loadgen_pct": 40.0},
            "peak_rss_kib": 102400,
        }

    table = run.render_table(
        {
            "a": {"leveret": [result(20_000, 900)], "rabbitmq": [result(40_000, 500)]},
            "g": {"leveret": [result(1000, 800)], "rabbitmq": [result(1000, 400, ok=False)]},
        },
        ("leveret", "rabbitmq"),
    )
    lines = table.splitlines()
    assert len(lines) == 4
    assert "| 0.50x |" in lines[2]
    assert "| 25.0 | 12.5 |" in lines[2]  # 5 CPU s over 200k / 400k messages
    assert "p99 2.00x" in lines[3]
    assert "1/1, 0/1" in lines[3]


def test_wait_quiet_returns_once_the_machine_is_below_the_bound() -> None:
    # A bound no machine exceeds is met by the first window; a zero budget waits for nothing.
    assert run.wait_quiet(30, busy_cores=10_000, window=0.05) < 5
    assert run.wait_quiet(0) == pytest.approx(0, abs=0.5)
