"""A command's fixed cost (issue 27): what a small backup or a `flud ls`
pays before and around its own work. The renewal runs beside the job's
start and is never asked twice at once; the random walks do not hold up a
job whose bootstrap named enough live nodes (their nodes still join); the
snapshot list loads neither Twisted nor the crypto libraries."""
import os
import subprocess
import sys
from types import SimpleNamespace

from twisted.internet import defer

from flud.client.index import ClientIndex
from flud.client.lease_renewal import META, renew_leases
from flud.protocol import peer_file
from flud.protocol.node_record import Address, sign_record
from tests.unit.client.test_discover_records import (HONEST, NOW, FakeBootstrap, entry,
                                                     network_over)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))


def test_a_renewal_under_way_is_joined_not_asked_again(tmp_path):
    index = ClientIndex(str(tmp_path / "index.sqlite"))
    pending = {}
    ids = [bytes([i]) * 32 for i in range(5)]

    def stats(node_id):
        pending.setdefault(node_id, []).append(defer.Deferred())
        return pending[node_id][-1]
    network = SimpleNamespace(nodes=dict.fromkeys(ids), alive_ids=lambda: list(ids),
                              stats=stats)
    ctx = SimpleNamespace(index=index, network=network)
    first, second = [], []
    renew_leases(ctx, now=lambda: 1000.0).addBoth(first.append)
    renew_leases(ctx, now=lambda: 1000.0).addBoth(second.append)   # e.g. a backup's last
    assert not first and not second
    for node_id in ids:
        assert len(pending[node_id]) == 1            # asked once, not twice
        pending[node_id][0].callback({"leases": {"lease_seconds": 90 * 86400}})
    assert first == [5]
    assert second == [0]                              # it waited, then it was not due
    assert index.get_meta(META) == 1000.0
    assert all(len(asked) == 1 for asked in pending.values())
    index.close()


def test_a_failed_renewal_under_way_lets_the_next_one_ask(tmp_path):
    index = ClientIndex(str(tmp_path / "index.sqlite"))
    asked = []
    ids = [bytes([i]) * 32 for i in range(4)]
    replies = {}

    def stats(node_id):
        asked.append(node_id)
        replies[node_id] = d = defer.Deferred()
        return d
    network = SimpleNamespace(nodes=dict.fromkeys(ids), alive_ids=lambda: list(ids),
                              stats=stats)
    ctx = SimpleNamespace(index=index, network=network)
    second = []
    renew_leases(ctx, now=lambda: 1000.0)
    renew_leases(ctx, now=lambda: 1000.0).addBoth(second.append)
    for node_id in ids:   # nobody answered: nothing recorded, the waiting one asks itself
        replies.pop(node_id).errback(ConnectionRefusedError("down"))
    assert index.get_meta(META) is None
    assert len(asked) == 2 * len(ids) and not second
    for d in replies.values():
        d.callback({})
    assert second == [len(ids)] and index.get_meta(META) == 1000.0
    index.close()


def _walking_network(tmp_path):
    network = network_over(tmp_path, [(4000, FakeBootstrap(
        HONEST[0], [entry(i, 5000 + n) for n, i in enumerate(HONEST[:5])]))])
    network.net.local = SimpleNamespace(upload_limit=None, download_limit=None)
    walks = defer.Deferred()
    network.finder.walk = lambda count: walks
    return network, walks


def test_enough_known_nodes_start_the_job_before_the_walks_end(tmp_path):
    network, walks = _walking_network(tmp_path)
    done = []
    network.discover(enough=5).addBoth(done.append)
    assert done == [5]                                 # not held by the walks
    assert not os.path.exists(network.peers_path)      # saved when they end, with theirs
    late = HONEST[5]
    record = sign_record(late, 1, NOW + 3600, [Address.tcp("127.0.0.1", 5555)])
    network.finder.learn([record])
    network.finder.answered.add(late.node_id)
    walks.callback(set(network.finder.answered))
    assert network.nodes[late.node_id].port == 5555    # a walk's node joins the candidates
    assert late.node_id in {r.node_id for r in peer_file.load(network.peers_path)}


def test_too_few_known_nodes_wait_for_the_walks(tmp_path):
    network, walks = _walking_network(tmp_path)
    done = []
    network.discover(enough=6).addBoth(done.append)
    assert not done                                    # 5 known < 6: the walks first
    walks.callback(set())
    assert done == [5] and os.path.exists(network.peers_path)


def test_a_network_closed_before_its_walks_end_keeps_what_it_knows(tmp_path):
    network, walks = _walking_network(tmp_path)
    network.discover(enough=1)
    network.close()
    assert len(peer_file.load(network.peers_path)) == 5
    walks.callback(set())                              # late: changes nothing, no error


def test_the_snapshot_list_loads_neither_twisted_nor_the_crypto(tmp_path):
    """`flud ls` (the local list) is start-up and one query: what it does not
    need it does not import (Twisted alone was two thirds of its time)."""
    home = str(tmp_path / "home")
    made = subprocess.run([sys.executable, "-m", "flud", "init", "--home", home, "--join",
                           "127.0.0.1:1"], capture_output=True, text=True, cwd=ROOT,
                          timeout=60)
    assert made.returncode == 0, made.stderr
    probe = (
        "import io, contextlib, sys\n"
        "from flud.cli.main import main\n"
        "out = io.StringIO()\n"
        "with contextlib.redirect_stdout(out):\n"
        f"    code = main(['ls', '--home', {home!r}])\n"
        "heavy = sorted(m for m in sys.modules if m.startswith(('twisted', 'Crypto', 'zfec'))\n"
        "               or m in ('flud.crypto', 'flud.keys', 'flud.node.process'))\n"
        "print(code, heavy, 'no snapshots' in out.getvalue())\n")
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                       cwd=ROOT, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "0 [] True", r.stdout
