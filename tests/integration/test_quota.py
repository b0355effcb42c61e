"""Give to get on a real testnet (issue 31, docs/quotas.md).

Nodes run with a small --grant. A home that runs no node stores its grant's
worth; its next backup is refused with QUOTA everywhere and exits non-zero
naming the numbers. The same home is then linked to node 0 (`flud link`):
node 0 pushes the link to its peers, they place claims on it (node 0 now
holds their data) and spot check them, the home's credit grows with what
its node gives, and the same backup goes through, every share placed. A
forged link is refused with BAD_LINK.
"""
import json
import os

import pytest

from tests.integration.helpers import flud, init_client, output, tool, wait_until, write_random

pytestmark = pytest.mark.integration

NODES = 5
GRANT = 256 * 1024


def ledgers(net) -> list:
    return [s["stats"]["ledger"] for s in tool("stats", net.dir)]


def test_a_home_with_no_node_is_refused_after_its_grant_and_keeps_storing_once_linked(
        testnet_factory, tmp_path):
    net = testnet_factory(NODES, extra=("--grant", str(GRANT), "--ledger-interval", "0.2"))
    home, src = str(tmp_path / "home"), tmp_path / "src"
    init_client(home, net, None, "--k", "2", "--n", "4")
    os.makedirs(src)
    write_random(src / "first", 200_000, 1)
    proc = flud("backup", str(src), "--home", home)            # within the grant
    assert proc.returncode == 0, output(proc)

    write_random(src / "second", 700_000, 2)                    # past it, on every node
    refused = flud("backup", str(src), "--home", home)
    assert refused.returncode != 0, output(refused)
    text = refused.stdout + refused.stderr
    assert "QUOTA" in text and f"grant {GRANT}" in text and "given 0" in text, output(refused)
    assert sum(ledger["refused"] for ledger in ledgers(net)) >= 1

    node0 = os.path.join(net.dir, "node-00")
    linked = flud("link", "--home", home, "--node-home", node0, "--json")
    assert linked.returncode == 0, output(linked)
    owner = json.loads(linked.stdout)["owner"]
    # The nodes holding the home's data learn its link from node 0, place
    # claims there and check them: only what they verified counts.
    wait_until(lambda: sum(1 for ledger in ledgers(net) if ledger["given"].get(owner, 0) > 0) >= 3,
               30, "nodes crediting the home for claims node 0 holds for them")
    stats = ledgers(net)
    assert stats[0]["own_links"] == 1 and stats[0]["claims"] == 0
    assert sum(ledger["claim_bytes_verified"] for ledger in stats) > 0

    kept = flud("backup", str(src), "--home", home)
    assert kept.returncode == 0, output(kept)
    assert "reduced redundancy" not in kept.stdout, output(kept)   # every share placed

    # A link whose node signature was tampered with; one cut short.
    links = os.path.join(home, "links")
    raw = open(os.path.join(links, os.listdir(links)[0]), "rb").read()
    for name, bad in (("forged", raw[:-10] + bytes(10)), ("short", raw[:40])):
        path = tmp_path / f"{name}.link"
        path.write_bytes(bad)
        answer = tool("link", net.addr(1), home, path)
        assert answer["result"] == "BAD_LINK" and "LINK_" in answer["message"], answer
