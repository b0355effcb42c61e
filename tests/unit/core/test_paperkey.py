"""The key on paper (flud/paperkey.py): typed back in any case, with O for 0
and l for 1; a mistyped, missing or misplaced line is named."""
import pytest

from flud import paperkey
from flud.keys import Identity, WrongPassphrase

SECRET = bytes(range(32))


@pytest.fixture(scope="module")
def sealed():
    identity = Identity.generate()
    return identity, paperkey.seal(identity, SECRET, "correct horse")


def key_lines(payload):
    return paperkey.to_lines(payload)


def test_typed_back_sloppily_it_opens_with_the_passphrase(sealed):
    identity, payload = sealed
    lines = key_lines(payload)
    assert len(lines) == 12 and all(len(line) <= 27 for line in lines)
    sloppy = [line[:4] + line[4:].lower().replace("0", "o").replace("1", "l").replace(" ", "-")
              for line in lines]
    back, secret = paperkey.unseal(paperkey.from_lines("\n".join(sloppy)), "correct horse")
    assert back.node_id == identity.node_id and secret == SECRET
    with pytest.raises(WrongPassphrase, match="every line matches its checksum"):
        paperkey.unseal(payload, "correct h0rse")


def test_each_mistyped_or_missing_line_is_named(sealed):
    _, payload = sealed
    lines = key_lines(payload)
    for number in range(1, len(lines) + 1):
        line = lines[number - 1]
        char = line[4]
        typo = line[:4] + ("Z" if char != "Z" else "Y") + line[5:]
        text = "\n".join(lines[:number - 1] + [typo] + lines[number:])
        with pytest.raises(paperkey.BadPaperLine) as err:
            paperkey.from_lines(text)
        assert err.value.lines == (number,)
    swapped = lines[:2] + [lines[3][:4] + lines[2][4:], lines[2][:4] + lines[3][4:]] + lines[4:]
    with pytest.raises(paperkey.BadPaperLine, match="03, 04 do not match"):
        paperkey.from_lines("\n".join(swapped))
    with pytest.raises(paperkey.BadPaperLine, match="05 missing"):
        paperkey.from_lines("\n".join(lines[:4] + lines[5:]))
