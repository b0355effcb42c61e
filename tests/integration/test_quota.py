"""Give to get on a real testnet (issue 31, docs/quotas.md).

Nodes run with a small --grant. Home A runs no node: once every node holds
a grant's worth for it, its next backup is refused with QUOTA everywhere
and exits non-zero naming the numbers. Home B is linked to node 0 (`flud
link`): node 0 pushes the link to its peers, they place claims on it and
spot check them, and B's credit grows with what it gives, so the same
backup of B goes through. A forged link is refused with BAD_LINK.
"""
import json
import os

import pytest

from tests.integration.helpers import flud, init_client, output, tool, wait_until, write_random

pytestmark = pytest.mark.integration

NODES = 5
GRANT = 256 * 1024


def given(stats: list, owner_hex: str) -> list:
    return [s["stats"]["ledger"]["given"].get(owner_hex, 0) for s in stats]


def test_a_home_with_no_node_is_refused_after_its_grant_and_a_linked_one_keeps_storing(
        testnet_factory, tmp_path):
    net = testnet_factory(NODES, extra=("--grant", str(GRANT), "--ledger-interval", "0.2"))
    homes = {}
    for name in ("a", "b"):
        homes[name] = str(tmp_path / name)
        init_client(homes[name], net, None, "--k", "2", "--n", "4")
        os.makedirs(tmp_path / f"src-{name}")
    node0 = os.path.join(net.dir, "node-00")
    linked = flud("link", "--home", homes["b"], "--node-home", node0, "--json")
    assert linked.returncode == 0, output(linked)
    owner_b = json.loads(linked.stdout)["owner"]

    for name, seed in (("a", 1), ("b", 2)):      # within the grant: both store
        write_random(tmp_path / f"src-{name}" / "first", 200_000, seed)
        proc = flud("backup", str(tmp_path / f"src-{name}"), "--home", homes[name])
        assert proc.returncode == 0, output(proc)

    # The nodes holding B's data learn B's link from node 0, place claims on
    # it and check them: only what they verified counts.
    wait_until(lambda: sum(1 for g in given(tool("stats", net.dir), owner_b) if g > 0) >= 2,
               20, "nodes crediting B for claims node 0 holds")
    stats = tool("stats", net.dir)
    assert stats[0]["stats"]["ledger"]["own_links"] == 1
    assert sum(s["stats"]["ledger"]["claim_bytes_verified"] for s in stats) > 0

    for name, seed in (("a", 3), ("b", 4)):      # past the grant
        write_random(tmp_path / f"src-{name}" / "second", 700_000, seed)
    refused = flud("backup", str(tmp_path / "src-a"), "--home", homes["a"])
    assert refused.returncode != 0, output(refused)
    text = refused.stdout + refused.stderr
    assert "QUOTA" in text and f"grant {GRANT}" in text and "given 0" in text, output(refused)
    stats = tool("stats", net.dir)
    assert sum(s["stats"]["ledger"]["refused"] for s in stats) >= 1
    kept = flud("backup", str(tmp_path / "src-b"), "--home", homes["b"])
    assert kept.returncode == 0, output(kept)
    assert "reduced redundancy" not in kept.stdout, output(kept)   # every share placed

    # A link signed by one key only, and one whose signature was tampered with.
    links = os.path.join(homes["b"], "links")
    raw = (tmp_path.parent / links / os.listdir(links)[0]).read_bytes()
    bad = tmp_path / "forged.link"
    bad.write_bytes(raw[:-10] + bytes(10))
    answer = tool("link", net.addr(1), homes["a"], bad)
    assert answer["result"] == "BAD_LINK" and "LINK_" in answer["message"], answer

