"""`flud link --home H --node-home DIR`: one record, both keys, in both homes."""
import json
import os

from flud.cli.main import main
from flud.keys import Identity
from flud.trust.link import read_link


def make_home(path) -> Identity:
    os.makedirs(path)
    identity = Identity.generate()
    identity.save(os.path.join(path, "identity.pem"))
    return identity


def test_link_writes_a_record_both_keys_signed_into_both_homes(tmp_path, capsys):
    owner, node = make_home(tmp_path / "client"), make_home(tmp_path / "node")
    assert main(["link", "--home", str(tmp_path / "client"), "--node-home",
                 str(tmp_path / "node"), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert (result["owner"], result["node"]) == (owner.node_id.hex(), node.node_id.hex())
    for path in (result["node_file"], result["client_file"]):
        with open(path, "rb") as f:
            link = read_link(f.read())
        assert (link.owner_id, link.node_id) == (owner.node_id, node.node_id)
    assert os.path.dirname(result["node_file"]) == str(tmp_path / "node" / "links")


def test_link_refuses_a_home_without_a_key(tmp_path, capsys):
    make_home(tmp_path / "client")
    os.makedirs(tmp_path / "empty")
    assert main(["link", "--home", str(tmp_path / "client"), "--node-home",
                 str(tmp_path / "empty")]) == 2
    assert "holds no identity.pem" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "client" / "links")
