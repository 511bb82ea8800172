"""``leveret.config.load()``: defaults, the TOML file, ``LEVERET_*`` variables and overrides.

Precedence is file < environment < overrides (flags); every unusable setting is a
``ConfigError`` whose message names the setting (and where it came from), never another
exception.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import pytest

from leveret.config import (
    ConfigError,
    Settings,
    cluster_advertise,
    from_document,
    load,
    peer_addresses,
    to_document,
)

if TYPE_CHECKING:
    from pathlib import Path

# Left out of the compiled pass (scripts/test): the settings are not compiled.
pytestmark = pytest.mark.pure_only

NO_ENV: dict[str, str] = {}


def write(tmp_path: Path, text: str, name: str = "leveret.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def config_error(
    config_file: str | Path | None = None,
    environ: dict[str, str] | None = None,
    overrides: dict[str, object] | None = None,
) -> str:
    """The message of the ConfigError that ``load`` raises for these sources."""
    with pytest.raises(ConfigError) as info:
        load(config_file, environ=NO_ENV if environ is None else environ, overrides=overrides)
    message = str(info.value)
    assert message
    assert "\n" not in message, "the CLI prints the message as one line"
    return message


# -- defaults ---------------------------------------------------------------------------


def test_defaults_match_the_readme() -> None:
    settings = load(environ=NO_ENV)
    assert settings == Settings()
    assert settings.host == "127.0.0.1"
    assert settings.port == 5672
    assert settings.heartbeat == 60
    assert settings.frame_max == 131072
    assert settings.channel_max == 2047
    assert settings.max_message_size == 128 * 1024 * 1024
    assert settings.log_level == "info"


def test_settings_are_frozen() -> None:
    settings = load(environ=NO_ENV)
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.port = 1  # type: ignore[misc]


def test_unrelated_environment_variables_are_ignored() -> None:
    env = {"PATH": "/bin", "LEVERET": "x", "LEVERET_TEST_AMQP_URL": "amqp://x", "leveret_port": "1"}
    assert load(environ=env) == Settings()


def test_none_overrides_leave_the_default() -> None:
    assert load(environ=NO_ENV, overrides={"port": None, "host": None}) == Settings()


def test_reads_os_environ_when_no_mapping_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEVERET_PORT", "6001")
    assert load().port == 6001


# -- the TOML file ----------------------------------------------------------------------


def test_file_with_leveret_table(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        '[leveret]\nhost = "0.0.0.0"\nport = 5673\nheartbeat = 30\nframe_max = 8192\n'
        'channel_max = 16\nmax_message_size = 1000\nlog_level = "debug"\n',
    )
    assert load(path, environ=NO_ENV) == Settings(
        host="0.0.0.0",
        port=5673,
        heartbeat=30,
        frame_max=8192,
        channel_max=16,
        max_message_size=1000,
        log_level="debug",
    )


def test_file_without_leveret_table(tmp_path: Path) -> None:
    path = write(tmp_path, "port = 5674\nheartbeat = 0\n")
    settings = load(path, environ=NO_ENV)
    assert settings.port == 5674
    assert settings.heartbeat == 0
    assert settings.host == "127.0.0.1"


def test_file_path_may_be_a_string(tmp_path: Path) -> None:
    path = write(tmp_path, "[leveret]\nport = 5675\n")
    assert load(str(path), environ=NO_ENV).port == 5675


def test_file_keys_with_dashes(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "[leveret]\nframe-max = 8192\nchannel-max = 10\nmax-message-size = 4096\n"
        'log-level = "warning"\n',
    )
    settings = load(path, environ=NO_ENV)
    assert settings.frame_max == 8192
    assert settings.channel_max == 10
    assert settings.max_message_size == 4096
    assert settings.log_level == "warning"


def test_file_keys_with_underscores(tmp_path: Path) -> None:
    path = write(tmp_path, "[leveret]\nframe_max = 16384\nmax_message_size = 10\n")
    settings = load(path, environ=NO_ENV)
    assert settings.frame_max == 16384
    assert settings.max_message_size == 10


def test_empty_file_gives_defaults(tmp_path: Path) -> None:
    assert load(write(tmp_path, ""), environ=NO_ENV) == Settings()


def test_empty_leveret_table_gives_defaults(tmp_path: Path) -> None:
    assert load(write(tmp_path, "[leveret]\n"), environ=NO_ENV) == Settings()


def test_other_tables_beside_leveret_are_ignored(tmp_path: Path) -> None:
    path = write(tmp_path, "[leveret]\nport = 5676\n\n[tool.other]\nanything = 1\n")
    assert load(path, environ=NO_ENV).port == 5676


def test_log_level_is_case_insensitive(tmp_path: Path) -> None:
    path = write(tmp_path, '[leveret]\nlog_level = "WARNING"\n')
    assert load(path, environ=NO_ENV).log_level.lower() == "warning"


@pytest.mark.parametrize("level", ["debug", "info", "warning", "error"])
def test_every_documented_log_level_is_accepted(level: str) -> None:
    assert load(environ=NO_ENV, overrides={"log_level": level}).log_level == level


def test_port_zero_and_frame_max_zero_are_allowed() -> None:
    settings = load(environ=NO_ENV, overrides={"port": 0, "frame_max": 0, "heartbeat": 0})
    assert (settings.port, settings.frame_max, settings.heartbeat) == (0, 0, 0)


def test_boundaries_are_allowed() -> None:
    settings = load(
        environ=NO_ENV,
        overrides={"port": 65535, "frame_max": 4096, "channel_max": 65535, "heartbeat": 65535},
    )
    assert (settings.port, settings.frame_max) == (65535, 4096)
    assert (settings.channel_max, settings.heartbeat) == (65535, 65535)


# -- environment variables --------------------------------------------------------------


def test_environment_variables() -> None:
    env = {
        "LEVERET_HOST": "::1",
        "LEVERET_PORT": "5680",
        "LEVERET_HEARTBEAT": "15",
        "LEVERET_FRAME_MAX": "65536",
        "LEVERET_CHANNEL_MAX": "100",
        "LEVERET_MAX_MESSAGE_SIZE": "2048",
        "LEVERET_LOG_LEVEL": "error",
    }
    assert load(environ=env) == Settings(
        host="::1",
        port=5680,
        heartbeat=15,
        frame_max=65536,
        channel_max=100,
        max_message_size=2048,
        log_level="error",
    )


def test_environment_overrides_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, '[leveret]\nport = 5673\nheartbeat = 30\nhost = "0.0.0.0"\n')
    settings = load(path, environ={"LEVERET_PORT": "5690", "LEVERET_HEARTBEAT": "5"})
    assert settings.port == 5690
    assert settings.heartbeat == 5
    assert settings.host == "0.0.0.0"  # not in the environment: the file's value stays


def test_overrides_win_over_environment_and_file(tmp_path: Path) -> None:
    path = write(tmp_path, "[leveret]\nport = 5673\nheartbeat = 30\nchannel_max = 7\n")
    settings = load(
        path,
        environ={"LEVERET_PORT": "5690", "LEVERET_HEARTBEAT": "5"},
        overrides={"port": 5700, "heartbeat": None},
    )
    assert settings.port == 5700  # override beats environment and file
    assert settings.heartbeat == 5  # None override: the environment stays
    assert settings.channel_max == 7  # only in the file


def test_overrides_alone() -> None:
    settings = load(environ=NO_ENV, overrides={"host": "::1", "port": 1234, "log_level": "debug"})
    assert (settings.host, settings.port, settings.log_level) == ("::1", 1234, "debug")


def test_an_invalid_file_value_overridden_by_the_environment_is_still_an_error(
    tmp_path: Path,
) -> None:
    """Each source is checked as it is read, so a broken file is reported, not hidden."""
    path = write(tmp_path, '[leveret]\nport = "abc"\n')
    message = config_error(path, environ={"LEVERET_PORT": "5672"})
    assert "port" in message


# -- errors -----------------------------------------------------------------------------


def test_unknown_key_in_file(tmp_path: Path) -> None:
    path = write(tmp_path, "[leveret]\nprot = 5672\n")
    message = config_error(path)
    assert "unknown setting" in message
    assert "prot" in message
    assert str(path) in message


def test_unknown_key_in_file_without_table(tmp_path: Path) -> None:
    message = config_error(write(tmp_path, "heartbeats = 3\n"))
    assert "unknown setting" in message
    assert "heartbeats" in message


def test_leveret_that_is_not_a_table(tmp_path: Path) -> None:
    message = config_error(write(tmp_path, "leveret = 5\n"))
    assert "[leveret]" in message
    assert "table" in message


def test_unknown_override_key_is_a_config_error() -> None:
    """Bug: ``_coerce`` indexes ``_FIELDS[name]`` and raises a bare KeyError."""
    message = config_error(overrides={"prot": 5672})
    assert "prot" in message


@pytest.mark.parametrize("value", ['"abc"', "true", "[1]", '""', "{ a = 1 }"])
def test_non_integer_port_in_file(tmp_path: Path, value: str) -> None:
    message = config_error(write(tmp_path, f"[leveret]\nport = {value}\n"))
    assert "port must be an integer" in message
    assert str(tmp_path) in message


@pytest.mark.parametrize(("name", "value"), [("port", "5672.5"), ("heartbeat", "1.9")])
def test_float_in_file_is_not_truncated(tmp_path: Path, name: str, value: str) -> None:
    """Bug: ``_coerce`` calls ``int()`` on a TOML float, so 5672.5 silently becomes 5672."""
    message = config_error(write(tmp_path, f"[leveret]\n{name} = {value}\n"))
    assert f"{name} must be an integer" in message


@pytest.mark.parametrize("value", ["abc", "", "5672.0", "0x10", "1e3"])
def test_non_integer_port_in_environment(value: str) -> None:
    message = config_error(environ={"LEVERET_PORT": value})
    assert "LEVERET_PORT" in message
    assert "port must be an integer" in message


def test_non_integer_override() -> None:
    message = config_error(overrides={"frame_max": "big"})
    assert "--frame-max" in message
    assert "frame_max must be an integer" in message


def test_boolean_override_is_not_an_integer() -> None:
    message = config_error(overrides={"port": True})
    assert "port must be an integer" in message


@pytest.mark.parametrize(
    "name", ["port", "heartbeat", "frame_max", "channel_max", "max_message_size"]
)
def test_negative_values(name: str) -> None:
    var = f"LEVERET_{name.upper()}"
    message = config_error(environ={var: "-1"})
    assert var in message
    assert f"{name} must not be negative" in message


def test_negative_value_in_file(tmp_path: Path) -> None:
    message = config_error(write(tmp_path, "[leveret]\nheartbeat = -5\n"))
    assert "heartbeat must not be negative" in message


def test_negative_override() -> None:
    message = config_error(overrides={"port": -1})
    assert "--port" in message
    assert "must not be negative" in message


@pytest.mark.parametrize("port", [65536, 70000, 2**40])
def test_port_above_65535(port: int) -> None:
    message = config_error(overrides={"port": port})
    assert "port must be at most 65535" in message
    assert str(port) in message


def test_port_above_65535_from_file(tmp_path: Path) -> None:
    message = config_error(write(tmp_path, "[leveret]\nport = 65536\n"))
    assert "port must be at most 65535" in message


@pytest.mark.parametrize("frame_max", [1, 4095])
def test_frame_max_below_4096(frame_max: int) -> None:
    message = config_error(environ={"LEVERET_FRAME_MAX": str(frame_max)})
    assert "frame_max must be at least 4096" in message
    assert str(frame_max) in message


def test_channel_max_and_heartbeat_above_a_short() -> None:
    assert "channel_max must be at most 65535" in config_error(overrides={"channel_max": 65536})
    assert "heartbeat must be at most 65535" in config_error(overrides={"heartbeat": 65536})


def test_memory_paging_percent_is_a_percentage() -> None:
    assert load(environ=NO_ENV).memory_paging_percent == 50
    settings = load(environ={"LEVERET_MEMORY_PAGING_PERCENT": "100"})
    assert settings.memory_paging_percent == 100
    assert load(environ=NO_ENV, overrides={"memory_paging_percent": 0}).memory_paging_percent == 0
    message = config_error(overrides={"memory_paging_percent": 101})
    assert "memory_paging_percent must be at most 100" in message


@pytest.mark.parametrize("level", ["verbose", "", "critical", "warn"])
def test_bad_log_level(level: str) -> None:
    message = config_error(environ={"LEVERET_LOG_LEVEL": level})
    assert "log_level must be debug, info, warning or error" in message


def test_non_string_host_in_file(tmp_path: Path) -> None:
    message = config_error(write(tmp_path, "[leveret]\nhost = 127\n"))
    assert "host must be a string" in message


def test_non_string_log_level_in_file(tmp_path: Path) -> None:
    message = config_error(write(tmp_path, "[leveret]\nlog_level = 1\n"))
    assert "log_level must be a string" in message


@pytest.mark.parametrize(
    "text",
    ["[leveret\nport = 1\n", "port = \n", "port = 1\nport = 2\n", "[leveret]\nport = 5672 x\n"],
)
def test_bad_toml(tmp_path: Path, text: str) -> None:
    path = write(tmp_path, text)
    message = config_error(path)
    assert "not valid TOML" in message
    assert str(path) in message


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.toml"
    message = config_error(path)
    assert "cannot read config file" in message
    assert str(path) in message
    assert "No such file" in message


def test_directory_instead_of_file(tmp_path: Path) -> None:
    message = config_error(tmp_path)
    assert "cannot read config file" in message


def test_file_that_is_not_utf8(tmp_path: Path) -> None:
    """Bug: ``Path.read_text()`` raises UnicodeDecodeError, which ``load`` does not catch."""
    path = tmp_path / "latin1.toml"
    path.write_bytes(b'[leveret]\nhost = "h\xf4te"\n')
    message = config_error(path)
    assert str(path) in message


def test_error_from_file_names_the_file_and_setting(tmp_path: Path) -> None:
    path = write(tmp_path, "[leveret]\nchannel-max = -3\n")
    message = config_error(path)
    assert str(path) in message
    assert "channel_max" in message


def test_vhosts_from_file_env_and_flag(tmp_path: Path) -> None:
    path = tmp_path / "v.toml"
    path.write_text('[leveret]\nvhosts = ["/", "dev"]\n')
    assert load(path, environ={}).vhosts == ("/", "dev")
    assert load(path, environ={"LEVERET_VHOSTS": "/, prod ,/"}).vhosts == ("/", "prod")
    assert load(environ={}, overrides={"vhosts": "x"}).vhosts == ("x",)


@pytest.mark.parametrize("value", ["[1, 2]", '""', "[]"])
def test_bad_vhosts_are_refused(tmp_path: Path, value: str) -> None:
    path = tmp_path / "v.toml"
    path.write_text(f"[leveret]\nvhosts = {value}\n")
    with pytest.raises(ConfigError, match="vhosts"):
        load(path, environ={})


def test_default_user_settings() -> None:
    settings = load(environ={"LEVERET_DEFAULT_USER": "admin", "LEVERET_DEFAULT_PASS": "pw"})
    assert (settings.default_user, settings.default_pass) == ("admin", "pw")
    with pytest.raises(ConfigError, match="default_user"):
        load(environ={}, overrides={"default_user": ""})


def test_consumer_timeout_from_every_source(tmp_path: Path) -> None:
    assert load(environ={}).consumer_timeout == 1_800_000  # RabbitMQ's 30 minutes
    path = tmp_path / "c.toml"
    path.write_text("[leveret]\nconsumer-timeout = 60000\n")
    assert load(path, environ={}).consumer_timeout == 60000
    assert load(path, environ={"LEVERET_CONSUMER_TIMEOUT": "0"}).consumer_timeout == 0
    assert load(environ={}, overrides={"consumer_timeout": 500}).consumer_timeout == 500
    with pytest.raises(ConfigError, match="consumer_timeout"):
        load(environ={"LEVERET_CONSUMER_TIMEOUT": "-1"})


def test_auth_and_tls_settings() -> None:
    env = {
        "LEVERET_LOOPBACK_USERS": "none",
        "LEVERET_CONNECTION_MAX": "10",
        "LEVERET_TLS_CERTFILE": "c.pem",
        "LEVERET_TLS_KEYFILE": "k.pem",
        "LEVERET_TLS_CACERTFILE": "ca.pem",
        "LEVERET_TLS_VERIFY_PEER": "yes",
        "LEVERET_TLS_FAIL_IF_NO_PEER_CERT": "true",
        "LEVERET_TLS_MIN_VERSION": "1.3",
        "LEVERET_SSL_CERT_LOGIN_FROM": "common_name",
    }
    settings = load(environ=env)
    assert settings.loopback_users == ()
    assert settings.connection_max == 10
    assert settings.tls_verify_peer is True
    assert settings.tls_fail_if_no_peer_cert is True
    assert settings.tls_min_version == "1.3"
    assert settings.ssl_cert_login_from == "common_name"
    assert load(environ={}).loopback_users == ("guest",)
    assert load(environ={"LEVERET_LOOPBACK_USERS": "a, b"}).loopback_users == ("a", "b")


def test_anonymous_login_is_guest_by_default_and_none_turns_it_off(tmp_path: Path) -> None:
    # RabbitMQ 4's anonymous_login_user: guest unless set; "none" in any source = off.
    assert load(environ={}).anonymous_login_user == "guest"
    assert load(environ={"LEVERET_ANONYMOUS_LOGIN_USER": "app"}).anonymous_login_user == "app"
    assert load(environ={"LEVERET_ANONYMOUS_LOGIN_USER": "none"}).anonymous_login_user == ""
    assert load(environ={"LEVERET_ANONYMOUS_LOGIN_USER": "None"}).anonymous_login_user == ""
    path = tmp_path / "leveret.toml"
    path.write_text('[leveret]\nanonymous_login_user = "none"\n')
    assert load(path, environ={}).anonymous_login_user == ""


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"LEVERET_TLS_VERIFY_PEER": "maybe"}, "must be true or false"),
        ({"LEVERET_TLS_CERTFILE": "c.pem"}, "needs tls_keyfile"),
        ({"LEVERET_TLS_KEYFILE": "k.pem"}, "needs tls_certfile"),
        ({"LEVERET_TLS_MIN_VERSION": "1.1"}, "1.2 or 1.3"),
        ({"LEVERET_TLS_FAIL_IF_NO_PEER_CERT": "1"}, "needs tls_verify_peer"),
        ({"LEVERET_TLS_VERIFY_PEER": "1"}, "needs tls_cacertfile"),
        ({"LEVERET_SSL_CERT_LOGIN_FROM": "email"}, "distinguished_name or common_name"),
        ({"LEVERET_TLS_PORT": "70000"}, "at most 65535"),
    ],
)
def test_bad_auth_and_tls_settings(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load(environ=env)


def test_stream_confirm_is_fsync_unless_written_is_asked_for() -> None:
    assert load(environ=NO_ENV).stream_confirm == "fsync"
    written = load(environ={"LEVERET_STREAM_CONFIRM": "written"})
    assert written.stream_confirm == "written"
    with pytest.raises(ConfigError, match="stream_confirm"):
        load(environ={"LEVERET_STREAM_CONFIRM": "never"})


def test_cluster_settings() -> None:
    settings = load(
        environ={"LEVERET_ETCD": "http://a:2379, http://b:2379", "LEVERET_NODE_NAME": "n1"},
        overrides={"cluster_port": 25673},
    )
    assert settings.etcd == ("http://a:2379", "http://b:2379")
    assert settings.node_name == "n1"
    assert settings.cluster_port == 25673
    assert load(environ={}).etcd == ()  # a single node unless told


def test_peer_addresses_name_where_to_reach_each_peer() -> None:
    settings = load(
        environ={"LEVERET_CLUSTER_PEER_ADDRESSES": "b@x=127.0.0.1:4001, c@x=[::1]:4002"}
    )
    assert peer_addresses(settings) == {"b@x": ("127.0.0.1", 4001), "c@x": ("::1", 4002)}
    assert peer_addresses(load(environ={})) == {}


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"LEVERET_ETCD": "a:2379"}, "http://HOST:PORT"),
        ({"LEVERET_CLUSTER_PORT": "70000"}, "cluster_port"),
        ({"LEVERET_CLUSTER_LEASE_TTL": "1"}, "cluster_lease_ttl"),
        ({"LEVERET_ETCD_PREFIX": "leveret"}, "etcd_prefix"),
        ({"LEVERET_CLUSTER_PEER_ADDRESSES": "b@x:4000"}, "NODE=HOST:PORT"),
        ({"LEVERET_CLUSTER_PEER_ADDRESSES": "b@x=h:70000"}, "NODE=HOST:PORT"),
        ({"LEVERET_CLUSTER_PEER_ADDRESSES": "=h:4000"}, "NODE=HOST:PORT"),
    ],
)
def test_bad_cluster_settings(environ: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load(environ=environ)


@pytest.mark.parametrize(
    ("value", "address"),
    [
        ("", None),
        ("10.0.0.7", ("10.0.0.7", 0)),  # the port the link listens on
        ("node-b.example:30672", ("node-b.example", 30672)),
        (" node-b:1 ", ("node-b", 1)),
        ("[fd00::7]:25672", ("fd00::7", 25672)),
        ("[fd00::7]", ("fd00::7", 0)),
        ("fd00::7", ("fd00::7", 0)),  # an IPv6 address without brackets has no port
    ],
)
def test_cluster_advertise_is_host_and_optional_port(
    value: str, address: tuple[str, int] | None
) -> None:
    settings = load(environ={"LEVERET_CLUSTER_ADVERTISE": value} if value else NO_ENV)
    assert cluster_advertise(settings) == address


def test_cluster_advertise_from_toml_and_flag(tmp_path: Path) -> None:
    path = write(tmp_path, '[leveret]\ncluster-advertise = "b.example:4000"\n')
    assert cluster_advertise(load(path, environ=NO_ENV)) == ("b.example", 4000)
    flagged = load(path, environ=NO_ENV, overrides={"cluster_advertise": "c.example"})
    assert cluster_advertise(flagged) == ("c.example", 0)


@pytest.mark.parametrize(
    "value",
    [
        "0.0.0.0",  # a wildcard names no interface a peer can dial
        "0.0.0.0:25672",
        "::",
        "[::]:25672",
        "host:",
        "host:0",
        "host:70000",
        "host:port",
        ":25672",
        "[fd00::7",
        "[fd00::7]25672",
        "http://host:25672",
        "a host:1",
        "guest@host",
    ],
)
def test_bad_cluster_advertise_is_refused_at_start(value: str) -> None:
    message = config_error(environ={"LEVERET_CLUSTER_ADVERTISE": value})
    assert message.startswith("cluster_advertise must be HOST or HOST:PORT")
    assert repr(value) in message


def test_cluster_advertise_port_is_one_nodes_not_the_workers() -> None:
    assert cluster_advertise(
        load(environ=NO_ENV, overrides={"cluster_advertise": "h", "workers": 2})
    )
    message = config_error(overrides={"cluster_advertise": "h:4000", "workers": 2})
    assert "cluster_advertise names one node's port" in message
    message = config_error(overrides={"stream_advertised_port": 5552, "workers": 2})
    assert "stream_advertised_port names one node's port" in message


def test_stream_advertised_host_and_port(tmp_path: Path) -> None:
    defaults = load(environ=NO_ENV)
    assert (defaults.stream_advertised_host, defaults.stream_advertised_port) == ("", 0)
    path = write(
        tmp_path,
        '[leveret]\nstream_advertised_host = "broker.example"\nstream_advertised_port = 30552\n',
    )
    settings = load(path, environ=NO_ENV)
    assert (settings.stream_advertised_host, settings.stream_advertised_port) == (
        "broker.example",
        30552,
    )
    env = {"LEVERET_STREAM_ADVERTISED_HOST": "10.1.2.3", "LEVERET_STREAM_ADVERTISED_PORT": "1"}
    settings = load(environ=env)
    assert (settings.stream_advertised_host, settings.stream_advertised_port) == ("10.1.2.3", 1)


def test_stream_advertised_tls_port(tmp_path: Path) -> None:
    assert load(environ=NO_ENV).stream_advertised_tls_port == 0
    path = write(tmp_path, "[leveret]\nstream_advertised_tls_port = 30551\n")
    assert load(path, environ=NO_ENV).stream_advertised_tls_port == 30551
    env = {"LEVERET_STREAM_ADVERTISED_TLS_PORT": "2"}
    assert load(environ=env).stream_advertised_tls_port == 2


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"LEVERET_STREAM_ADVERTISED_PORT": "65536"}, "stream_advertised_port must be at most"),
        ({"LEVERET_STREAM_ADVERTISED_PORT": "-1"}, "stream_advertised_port must not be negative"),
        (
            {"LEVERET_STREAM_ADVERTISED_TLS_PORT": "65536"},
            "stream_advertised_tls_port must be at most",
        ),
        (
            {"LEVERET_STREAM_ADVERTISED_TLS_PORT": "x"},
            "stream_advertised_tls_port must be an integer",
        ),
        ({"LEVERET_STREAM_ADVERTISED_HOST": "0.0.0.0"}, "stream_advertised_host must be"),
        ({"LEVERET_STREAM_ADVERTISED_HOST": "::"}, "stream_advertised_host must be"),
        ({"LEVERET_STREAM_ADVERTISED_HOST": "[::1]"}, "stream_advertised_host must be"),
        ({"LEVERET_STREAM_ADVERTISED_HOST": "a b"}, "stream_advertised_host must be"),
    ],
)
def test_bad_stream_advertised_settings(environ: dict[str, str], message: str) -> None:
    assert message in config_error(environ=environ)


def test_cluster_tls_settings_from_toml_variables_and_defaults(tmp_path: Path) -> None:
    # Off by default; when on, the peers' certificates are verified unless told otherwise.
    assert load(environ=NO_ENV).cluster_tls_certfile == ""
    assert load(environ=NO_ENV).cluster_tls_verify_peer is True
    path = tmp_path / "c.toml"
    path.write_text(
        "[leveret]\n"
        'cluster-tls-certfile = "node.pem"\n'
        'cluster_tls_keyfile = "node.key"\n'
        'cluster_tls_cacertfile = "ca.pem"\n'
    )
    settings = load(path, environ={})
    assert (settings.cluster_tls_certfile, settings.cluster_tls_keyfile) == ("node.pem", "node.key")
    assert settings.cluster_tls_cacertfile == "ca.pem"
    assert settings.cluster_tls_verify_peer is True
    unverified = load(
        environ={
            "LEVERET_CLUSTER_TLS_CERTFILE": "n.pem",
            "LEVERET_CLUSTER_TLS_KEYFILE": "n.key",
            "LEVERET_CLUSTER_TLS_VERIFY_PEER": "false",
        }
    )
    assert unverified.cluster_tls_verify_peer is False
    assert unverified.cluster_tls_cacertfile == ""
    # Revocation and the dialer's name check: off unless set, from TOML and variables.
    assert load(environ=NO_ENV).cluster_tls_crlfile == ""
    assert load(environ=NO_ENV).cluster_tls_server_name_check is False
    path.write_text(
        path.read_text() + 'cluster_tls_crlfile = "ca.crl"\ncluster-tls-server-name-check = true\n'
    )
    settings = load(path, environ={})
    assert settings.cluster_tls_crlfile == "ca.crl"
    assert settings.cluster_tls_server_name_check is True
    checked = load(
        environ={
            "LEVERET_CLUSTER_TLS_CERTFILE": "n.pem",
            "LEVERET_CLUSTER_TLS_KEYFILE": "n.key",
            "LEVERET_CLUSTER_TLS_CACERTFILE": "ca.pem",
            "LEVERET_CLUSTER_TLS_CRLFILE": "ca.crl",
            "LEVERET_CLUSTER_TLS_SERVER_NAME_CHECK": "yes",
        }
    )
    assert (checked.cluster_tls_crlfile, checked.cluster_tls_server_name_check) == ("ca.crl", True)
    # What ``leveret serve --workers`` hands each worker keeps them.
    assert from_document(to_document(settings)) == settings


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"LEVERET_CLUSTER_TLS_CERTFILE": "c.pem"}, "needs cluster_tls_keyfile"),
        ({"LEVERET_CLUSTER_TLS_KEYFILE": "k.pem"}, "needs cluster_tls_certfile"),
        ({"LEVERET_CLUSTER_TLS_CACERTFILE": "ca.pem"}, "needs cluster_tls_certfile"),
        (
            {"LEVERET_CLUSTER_TLS_CERTFILE": "c.pem", "LEVERET_CLUSTER_TLS_KEYFILE": "k.pem"},
            "needs cluster_tls_cacertfile",
        ),
        ({"LEVERET_CLUSTER_TLS_VERIFY_PEER": "sometimes"}, "must be true or false"),
        (
            {"LEVERET_CLUSTER_TLS_CRLFILE": "ca.crl"},
            "cluster_tls_crlfile needs cluster_tls_certfile",
        ),
        (
            {"LEVERET_CLUSTER_TLS_SERVER_NAME_CHECK": "true"},
            "cluster_tls_server_name_check needs cluster_tls_certfile",
        ),
        ({"LEVERET_CLUSTER_TLS_SERVER_NAME_CHECK": "by name"}, "must be true or false"),
        (
            {
                "LEVERET_CLUSTER_TLS_CERTFILE": "c.pem",
                "LEVERET_CLUSTER_TLS_KEYFILE": "k.pem",
                "LEVERET_CLUSTER_TLS_VERIFY_PEER": "false",
                "LEVERET_CLUSTER_TLS_CRLFILE": "ca.crl",
            },
            "cluster_tls_crlfile needs cluster_tls_verify_peer",
        ),
        (
            {
                "LEVERET_CLUSTER_TLS_CERTFILE": "c.pem",
                "LEVERET_CLUSTER_TLS_KEYFILE": "k.pem",
                "LEVERET_CLUSTER_TLS_VERIFY_PEER": "false",
                "LEVERET_CLUSTER_TLS_SERVER_NAME_CHECK": "true",
            },
            "cluster_tls_server_name_check needs cluster_tls_verify_peer",
        ),
    ],
)
def test_bad_cluster_tls_settings(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load(environ=env)
