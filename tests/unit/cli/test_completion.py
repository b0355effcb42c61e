"""Completions and the man page are made from the parser: every command and
option of `flud` is in each, and bash completes with the script as written."""
import shutil
import subprocess

import pytest

from flud.cli.completion import bash_script, command_tree, man_page, walk, zsh_script
from flud.cli.main import build_parser


@pytest.fixture(scope="module")
def outputs():
    parser = build_parser()
    return command_tree(parser), bash_script(parser), zsh_script(parser), man_page(parser)


def test_every_command_and_option_appears_in_all_three(outputs):
    tree, bash, zsh, man = outputs
    nodes = list(walk(tree))[1:]
    names = {" ".join(n.path) for n in nodes}
    assert {"backup", "key export", "key passwd", "key import", "node run", "agent",
            "completion", "testnet up"} <= names
    for node in nodes:
        path = " ".join(node.path)
        assert f'["flud {path}"]' in bash, path
        assert "_flud" + "".join(f"_{p.replace('-', '_')}" for p in node.path) + "()" in zsh
        assert f".SS {path.replace('-', chr(92) + '-')}\n" in man, path
        for action in node.options:
            for flag in action.option_strings:
                assert flag in bash and flag in zsh, (path, flag)
                assert flag.replace("-", "\\-") in man, (path, flag)


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
@pytest.mark.parametrize("words, expected", [
    (["k"], ["key"]),
    (["key", ""], ["export", "import", "passwd"]),
    (["key", "export", "--pa"], ["--paper", "--passphrase-command", "--passphrase-file"]),
    (["completion", ""], ["bash", "man", "zsh"]),
    (["forget", "--keep-w"], ["--keep-weekly", "--keep-within"]),
])
def test_bash_completes_with_the_generated_script(outputs, words, expected, tmp_path):
    script = tmp_path / "flud.bash"
    script.write_text(outputs[1])
    words = ["flud", *words]
    shell = (f"source {script}; COMP_WORDS=({' '.join(repr(w) for w in words)}); "
             f"COMP_CWORD={len(words) - 1}; _flud; printf '%s\\n' \"${{COMPREPLY[@]}}\"")
    done = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, timeout=20)
    assert done.returncode == 0 and not done.stderr, done.stderr
    assert sorted(done.stdout.split()) == expected


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed (apt install zsh)")
def test_the_zsh_script_parses(outputs, tmp_path):
    script = tmp_path / "_flud"
    script.write_text(outputs[2])
    done = subprocess.run(["zsh", "-n", str(script)], capture_output=True, text=True, timeout=20)
    assert done.returncode == 0, done.stderr
