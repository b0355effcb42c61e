"""flud.lean: lazy modules and import_sparing, each case in a fresh
interpreter (what gets imported is the point)."""
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def run(code: str, path=None) -> str:
    env_path = [str(REPO)] + ([str(path)] if path else [])
    code = f"import sys; sys.path[:0] = {env_path!r}\n" + textwrap.dedent(code)
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def loaded(names):
    """Code: the names among `names` whose module code has run."""
    return (f"[n for n in {names!r} if n in sys.modules "
            f"and type(sys.modules[n]).__name__ != '_LazyModule']")


NODE_SPARES = ("asyncio", "html", "pickle", "ipaddress", "bz2", "lzma", "twisted.internet.udp",
               "twisted.internet.unix", "twisted.application.service", "twisted.plugin",
               "zipfile", "http.cookiejar", "subprocess", "tempfile", "hashlib", "hmac", "Crypto",
               "twisted.internet.process", "pty", "tokenize")


def test_a_node_loads_none_of_what_it_spares_and_each_works_when_used():
    out = run(f"""
        from flud.lean import defer_unused_imports
        defer_unused_imports()
        from twisted.internet import reactor
        import argparse, flud.node.process, flud.node.service, flud.storage.disk, flud.memory, flud.workers
        from flud.cli.main import build_parser  # a node parses its arguments with the whole parser
        from flud.cli.node import node_config
        node_config(build_parser().parse_args(["node", "run", "--home", "h", "--join", ":1"]))
        assert {loaded(("textwrap",))} == []  # until a help text is formatted
        argparse.ArgumentParser().format_help()  # imports shutil, which imports bz2 and lzma
        assert {loaded(NODE_SPARES)} == [], {loaded(NODE_SPARES)}

        import os, pickle, ipaddress, bz2, lzma, urllib.parse, shutil, warnings
        assert pickle.loads(pickle.dumps({{"a": 1}})) == {{"a": 1}}
        assert str(ipaddress.ip_address("::1")) == "::1"
        assert urllib.parse.urlsplit("http://[::1]:80/").hostname == "::1"
        assert bz2.decompress(bz2.compress(b"x")) == b"x"
        assert lzma.decompress(lzma.compress(b"y")) == b"y"
        assert "bztar" in dict(shutil.get_archive_formats())
        from twisted.internet import udp, unix, protocol
        assert udp.Port and unix.Server
        port = reactor.listenUDP(0, protocol.DatagramProtocol(), interface="127.0.0.1")
        port.stopListening()
        from twisted.python import compat
        import html
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert compat.escape is html.escape
        import http.cookiejar
        assert http.cookiejar.CookieJar
        import traceback
        try:
            raise ValueError("shown")
        except ValueError:
            assert "shown" in traceback.format_exc()  # linecache reads the source: tokenize
        import textwrap
        assert textwrap.dedent("  a") == "a"
        from twisted.internet import process
        assert callable(process.reapAllProcesses)
        import tempfile
        fd, path = tempfile.mkstemp()
        os.close(fd)
        os.unlink(path)
        from flud.keys import Identity, export_secret_bundle, import_secret_bundle
        me = Identity.generate()
        back, secret = import_secret_bundle(export_secret_bundle(me, b"s", "pw"), "pw")
        assert back.node_id == me.node_id and secret == b"s"
        print("ok")
    """)
    assert out == "ok"


def test_plain_import_leaves_a_lazy_module_unloaded_and_any_attribute_loads_it(tmp_path):
    (tmp_path / "slowmod.py").write_text("import time\nLOADS = []\ntime.sleep(0.2)\nLOADS.append(1)\nVALUE = 42\n")
    out = run("""
        import sys, threading
        from flud.lean import _LAZY, _install_hook; import importlib; lazy_import = lambda name: (_LAZY.add(name), _install_hook(), importlib.import_module(name))[-1]  # noqa: E731,E501
        lazy_import("slowmod")
        import slowmod
        assert type(sys.modules["slowmod"]).__name__ == "_LazyModule"
        assert slowmod.__name__ == "slowmod" and slowmod.__spec__.name == "slowmod"
        assert type(slowmod).__name__ == "_LazyModule"
        # threads touching it at once all see it whole, and its code runs once
        seen = []
        threads = [threading.Thread(target=lambda: seen.append(slowmod.VALUE)) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert seen == [42] * 8, seen
        assert slowmod.LOADS == [1] and type(slowmod) is type(sys)
        print("ok")
    """, path=tmp_path)
    assert out == "ok"


def test_lazy_submodule_from_its_package_and_setattr_load_it(tmp_path):
    pkg = tmp_path / "lazypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "sub.py").write_text("X = 1\n")
    out = run("""
        import sys
        from flud.lean import _LAZY, _install_hook; import importlib; lazy_import = lambda name: (_LAZY.add(name), _install_hook(), importlib.import_module(name))[-1]  # noqa: E731,E501
        lazy_import("lazypkg.sub")
        from lazypkg import sub
        assert type(sub).__name__ == "_LazyModule"
        sub.Y = 2
        assert type(sub) is type(sys) and sub.X == 1 and sub.Y == 2
        lazy_import("lazypkg.sub")  # loaded already: nothing happens
        assert sys.modules["lazypkg.sub"] is sub
        print("ok")
    """, path=tmp_path)
    assert out == "ok"


def test_import_sparing_serves_lazy_names_and_falls_back(tmp_path):
    (tmp_path / "user_a.py").write_text(
        "from json import dumps, loads\n"
        "def encode(v):\n    return dumps(v)\n")
    (tmp_path / "user_b.py").write_text("from json import dumps, JSONDecoder\n")
    (tmp_path / "user_c.py").write_text(
        "from json import dumps, loads\n"
        "def __getattr__(name):\n    raise AttributeError(name)\n")
    out = run("""
        import sys
        from flud.lean import import_sparing

        def fake_dumps(v):
            return "fake"

        # a: json spared; loads comes from json on first use
        assert import_sparing("user_a", "json", {"dumps": fake_dumps}, lazy=("loads",)) is True
        import user_a
        assert "json" not in sys.modules and user_a.encode(1) == "fake"
        assert user_a.loads("[1]") == [1] and "json" in sys.modules
        import json
        assert user_a.loads is json.loads
        del sys.modules["json"]

        # b needs a name the stand-in lacks: imported the ordinary way
        assert import_sparing("user_b", "json", {"dumps": fake_dumps}) is False
        import user_b, json
        assert user_b.dumps is json.dumps and user_b.JSONDecoder is json.JSONDecoder
        del sys.modules["json"]

        # c already has a __getattr__: it gets the real names
        assert import_sparing("user_c", "json", {"dumps": fake_dumps}, lazy=("loads",)) is False
        import user_c, json
        assert user_c.dumps is json.dumps and user_c.loads is json.loads

        # nothing to do when the module is imported already
        assert import_sparing("user_a", "json", {}) is False
        print("ok")
    """, path=tmp_path)
    assert out == "ok"


def test_the_hook_imports_nothing_itself_and_modules_look_ordinarily_imported():
    out = run("""
        import sys, importlib.machinery
        before = set(sys.modules)
        from flud.lean import defer_unused_imports
        defer_unused_imports()
        new = set(sys.modules) - before
        assert not [m for m in new if m.split(".")[0] in ("twisted", "Crypto", "asyncio", "html")], new
        import pickle
        from twisted.internet import defer, udp
        assert type(pickle).__name__ == "_LazyModule" and type(udp).__name__ == "_LazyModule"
        assert "asyncio" not in sys.modules
        for module in (pickle, udp, defer, sys.modules["twisted.python.compat"]):
            assert isinstance(module.__loader__, importlib.machinery.SourceFileLoader), module
            assert module.__spec__.loader is module.__loader__
        assert pickle.dumps(1) and type(pickle) is type(sys)
        print("ok")
    """)
    assert out == "ok"
