"""`flud node run`'s arguments -> NodeConfig (flud/cli/node.py), and the
testnet harness's way back (a node it execs gets the config it would fork)."""
import dataclasses

import pytest

from flud.cli.main import build_parser
from flud.cli.node import node_config
from flud.node.config import DEFAULT_CAPACITY, DEFAULT_GRANT, NodeConfig
from flud.testnet.launch import node_run_args


def parse(*argv) -> NodeConfig:
    return node_config(build_parser().parse_args(["node", "run", *argv]))


def test_defaults_are_the_configs_own():
    # `node run` has a finite grant (docs/quotas.md); a NodeConfig made in code none
    assert parse("--home", "h") == NodeConfig(home="h", grant=DEFAULT_GRANT)
    assert NodeConfig(home="h").grant is None
    assert NodeConfig(home="h").capacity == DEFAULT_CAPACITY == 10 * 1024 ** 3
    assert NodeConfig(home="h").join is None and NodeConfig(home="h").memory_budget is None


def test_every_option():
    config = parse("--home", "/n", "--host", "0.0.0.0", "--port", "4100", "--join",
                   "10.0.0.2:4000", "--capacity", "500M", "--memory-log", "m.csv",
                   "--memory-budget", "64MiB", "--lease", "30d", "--trash-time", "15d",
                   "--lease-sweep-interval", "0.5", "-v")
    assert config == NodeConfig(home="/n", host="0.0.0.0", port=4100, join=("10.0.0.2", 4000),
                                capacity=500 * 1024 ** 2, memory_log="m.csv",
                                memory_budget=64 * 1024 ** 2, verbose=True,
                                lease_seconds=30 * 86400, trash_seconds=15 * 86400,
                                lease_sweep_interval=0.5, grant=DEFAULT_GRANT)


def test_lease_defaults_are_a_year_and_30_days_swept_hourly():
    config = parse("--home", "h")
    assert (config.lease_seconds, config.trash_seconds, config.lease_sweep_interval) == (
        365 * 86400, 30 * 86400, 3600)


@pytest.mark.parametrize("text, seconds", [("90d", 90 * 86400), ("2w", 14 * 86400), ("1.5h", 5400),
                                           ("30min", 1800), ("5s", 5), ("0.2", 0.2)])
def test_durations(text, seconds):
    assert parse("--home", "h", "--lease-sweep-interval", text).lease_sweep_interval == seconds


@pytest.mark.parametrize("flag", ["--lease", "--trash-time"])
def test_a_lease_or_trash_shorter_than_two_client_renewals_is_refused(flag, capsys):
    assert getattr(parse("--home", "h", flag, "2w"),
                   "lease_seconds" if flag == "--lease" else "trash_seconds") == 14 * 86400
    with pytest.raises(SystemExit):
        parse("--home", "h", flag, "13d")
    assert "less than 14 days" in capsys.readouterr().err


def test_a_bad_duration_is_a_usage_error():
    with pytest.raises(SystemExit):
        parse("--home", "h", "--trash-time", "soon")


@pytest.mark.parametrize("text, size", [("10G", 10 * 1024 ** 3), ("1.5k", 1536), ("123", 123),
                                        ("2TiB", 2 * 1024 ** 4), (" 7 mib", 7 * 1024 ** 2),
                                        ("3 M", 3 * 1024 ** 2)])
def test_sizes(text, size):
    assert parse("--home", "h", "--capacity", text).capacity == size


def test_join_without_a_host_means_this_machine():
    assert parse("--home", "h", "--join", ":4000").join == ("127.0.0.1", 4000)


def test_a_join_that_is_not_host_port_is_refused():
    with pytest.raises(ValueError, match="is not HOST:PORT"):
        parse("--home", "h", "--join", "somewhere")


def test_a_bad_size_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit:
        parse("--home", "h", "--capacity", "lots")
    assert exit.value.code == 2
    assert "argument --capacity: expected a size such as 64M" in capsys.readouterr().err


@pytest.mark.parametrize("flag, text, words", [
    ("--capacity", "7MB", "'MB' is ambiguous"), ("--lease-sweep-interval", "30m",
                                                 "write '30min' for minutes or '30mo'")])
def test_an_ambiguous_unit_is_refused_naming_the_choices(flag, text, words, capsys):
    with pytest.raises(SystemExit):
        parse("--home", "h", flag, text)
    assert words in capsys.readouterr().err


def test_home_is_required(capsys):
    with pytest.raises(SystemExit):
        parse("--port", "1")
    assert "--home" in capsys.readouterr().err


def test_the_config_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        NodeConfig(home="h").port = 1


@pytest.mark.parametrize("config", [
    NodeConfig(home="/t/node-00"),
    NodeConfig(home="/t/node-03", port=4003, join=("127.0.0.1", 4000), capacity=12 * 1024 ** 2,
               memory_log="/t/node-03/memory.csv"),
    NodeConfig(home="/x", host="0.0.0.0", memory_budget=1 << 20, verbose=True),
    NodeConfig(home="/y", lease_seconds=400.5 * 86400, trash_seconds=20 * 86400,
               lease_sweep_interval=0.2),
    NodeConfig(home="/q", grant=5 << 20, give_ratio=0.5, owner_quotas=((b"\x01" * 32, 7 << 20),),
               claim_allowance=1 << 30, ledger_interval=0.25),
])
def test_an_exec_spawned_node_gets_the_config_a_forked_one_would(config):
    args = build_parser().parse_args(node_run_args(config))
    assert node_config(args) == config


def test_testnet_up_capacity_is_a_size():
    args = build_parser().parse_args(["testnet", "up", "--dir", "d"])
    assert args.capacity == 10 * 1024 ** 3
    args = build_parser().parse_args(["testnet", "up", "--dir", "d", "--capacity", "12M"])
    assert args.capacity == 12 * 1024 ** 2


def test_grant_and_quota_flags():
    config = parse("--home", "h", "--grant", "2M", "--give-ratio", "0.5",
                   "--owner-quota", "ab" * 32 + "=1G", "--ledger-interval", "30s")
    assert (config.grant, config.give_ratio, config.ledger_interval) == (2 << 20, 0.5, 30.0)
    assert config.owner_quotas == ((b"\xab" * 32, 1 << 30),)
    assert parse("--home", "h", "--grant", "unlimited").grant is None


def test_a_bad_owner_quota_is_a_usage_error(capsys):
    with pytest.raises(SystemExit):
        parse("--home", "h", "--owner-quota", "abc=1G")
    assert "64-hex-digit owner id" in capsys.readouterr().err


def test_testnet_up_has_no_quota_unless_grant_is_given():
    args = build_parser().parse_args(["testnet", "up", "--dir", "d"])
    assert args.grant is None
    args = build_parser().parse_args(["testnet", "up", "--dir", "d", "--grant", "3M"])
    assert args.grant == 3 << 20
