"""DIAL_BACK and RESERVE against a real node on 127.0.0.1: a dial-back aimed
at a third party is refused with its code and nothing is dialled; one aimed
at the asker's own (observed) address is dialled, answered with what the
node saw, and a second one at once is rate limited; RESERVE answers with a
reservation's life, and `--no-relay` refuses it."""
import socket

from tests.integration.helpers import tool


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_dial_back_goes_only_to_the_observed_address_and_is_rate_limited(node_factory, tmp_path):
    node = node_factory("node")
    home = tmp_path / "asker"
    assert tool("dial-back", node.addr, home, "198.18.9.9", 7400) == ["DIAL_THIRD_PARTY"]
    port = closed_port()   # nobody listens there: the node's dial fails
    first, second = tool("dial-back", node.addr, home, "", port, 2)
    assert first == {"reached": False, "observed": "127.0.0.1"}
    assert second == "RATE_LIMITED"
    counters = tool("stats-one", node.addr, tmp_path / "other")["reachability"]["dial_backs"]
    assert counters == {"served": 1, "reached": 0, "third_party": 1, "rate_limited": 1}


def test_reserve_is_granted_and_refused_with_no_relay(node_factory, tmp_path):
    relay = node_factory("relay")
    assert tool("reserve", relay.addr, tmp_path / "a") == {"seconds": 600}
    stats = tool("stats-one", relay.addr, tmp_path / "b")["relay"]
    assert stats["reserved"] == 1 and stats["reservations"] in (0, 1)  # gone with its connection
    from tests.integration.helpers import NodeProcess
    closed = NodeProcess(tmp_path / "closed", extra=("--no-relay",))
    try:
        closed.wait_ready()
        assert tool("reserve", closed.addr, tmp_path / "c") == "RELAY_REFUSED"
    finally:
        closed.stop()
