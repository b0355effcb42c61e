"""The shape of a generated home (gen_tree.py): which folders, names, kinds and modes.

Areas in order, each until its share of the files is written (the writer raises Full):
projects (with .git, build output and dependency trees), Documents, dotfiles, Pictures,
Downloads, then a few media files that take what is left of the byte budget.
A dependency package is built from its own seed, so a vendored second copy of it is
byte for byte, name for name the same.
"""
from __future__ import annotations

import random

from tree_content import ANCHOR

LANGS = {  # extension, weight, build output, dependency tree
    "py": (".py", 30, None, "site-packages"), "js": (".js", 25, None, "node_modules"),
    "c": (".c", 12, ".o", "vendor"), "go": (".go", 10, None, None),
    "rs": (".rs", 10, ".o", None), "java": (".java", 8, ".class", None),
}
AREAS = (("projects", 0.80), ("documents", 0.08), ("dotfiles", 0.085), ("pictures", 0.008),
         ("downloads", 0.027))
HOOKS = ("pre-commit", "pre-push", "commit-msg", "post-update", "pre-rebase", "update")
MEDIA_CHUNK = 40_000_000


class Full(Exception):
    """The current area has its share of the files."""


def generate_layout(w, full=Full) -> None:
    rng = w.rng
    done = 0.0
    areas = {"projects": _projects, "documents": _documents, "dotfiles": _dotfiles,
             "pictures": _pictures, "downloads": _downloads}
    for name, share in AREAS:
        done += share
        w.limit = max(w.files + 1, min(int(w.target_files * done), w.target_files - 3))
        try:
            areas[name](w, random.Random(rng.getrandbits(64)))
        except full:
            pass
    w.limit = w.target_files + 64
    _media(w, random.Random(rng.getrandbits(64)))


# --------------------------------------------------------------------------- projects

def _projects(w, rng) -> None:
    langs = list(LANGS)
    weights = [LANGS[k][1] for k in langs]
    parents = ["projects", "src", "work/" + w.word(rng), "code/github.com/" + w.word(rng)]
    seen = set()
    while True:
        lang = rng.choices(langs, weights)[0]
        name = "-".join(w.word(rng) for _ in range(rng.choice((1, 1, 2))))
        if name in seen:
            continue
        seen.add(name)
        _project(w, random.Random(rng.getrandbits(64)), f"{rng.choice(parents)}/{name}", lang)


def _project(w, rng, base: str, lang: str) -> None:
    ext, _, obj, deps = LANGS[lang]
    span = w.span(rng)
    w.file(f"{base}/README.md", rng, "doc", span, keep=True)
    _license(w, rng, f"{base}/LICENSE", span)
    w.file(f"{base}/.gitignore", rng, "tiny", span, kind="conf")
    build = {"py": "pyproject.toml", "js": "package.json", "c": "Makefile", "go": "go.mod",
             "rs": "Cargo.toml", "java": "pom.xml"}[lang]
    w.file(f"{base}/{build}", rng, "tiny", span, kind="conf")
    if rng.random() < 0.2:
        w.symlink(f"{base}/docs/README.md", "../README.md")
    own = min(2500, max(6, int(rng.lognormvariate(4.4, 0.9))))
    start = w.files
    pkg = w.ident(rng) if lang in ("py", "go", "rs") else "src"
    dirs = [f"{base}/{'src/' + pkg if lang != 'go' else pkg}"]
    while w.files - start < own:
        parent = rng.choice(dirs)
        folder = parent if rng.random() < 0.3 or parent.count("/") > base.count("/") + 5 \
            else f"{parent}/{w.word(rng)}"
        dirs.append(folder)
        _source_dir(w, rng, folder, ext, obj, span)
        r = rng.random()
        if r < 0.15:
            _source_dir(w, rng, f"{base}/tests", ext, None, span)
        elif r < 0.22:
            w.file(f"{base}/docs/{w.word(rng)}.md", rng, "doc", span, keep=True)
        elif r < 0.26:
            w.file(f"{base}/scripts/{w.word(rng)}.sh", rng, "tiny", span, mode=0o755)
        elif r < 0.30:
            w.file(f"{base}/data/{w.ident(rng)}{rng.choice(('.csv', '.json', '.log'))}", rng,
                   "data", span, keep=True)
    if obj:
        for _ in range(rng.randint(1, 3)):
            w.file(f"{base}/bin/{w.word(rng)}", rng, "object", span, mode=0o755, kind="binary")
    _git(w, rng, f"{base}/.git", span)
    if deps and rng.random() < 0.75:
        scale = max(0.05, min(1.0, w.target_files / 50_000))
        count = max(2, int(rng.lognormvariate(3.6, 0.8) * scale))
        if deps == "node_modules":
            for _ in range(count):
                _npm_package(w, rng.getrandbits(64), f"{base}/node_modules", span, depth=0)
            w.mkdir(f"{base}/node_modules/.cache")
        elif deps == "site-packages":
            site = f"{base}/.venv/lib/python3.11/site-packages"
            w.symlink(f"{base}/.venv/lib64", "lib")
            w.file(f"{base}/.venv/pyvenv.cfg", rng, "tiny", span, kind="conf")
            for _ in range(count):
                _py_package(w, rng.getrandbits(64), site, span)
        else:
            for _ in range(max(1, count // 8)):
                _vendored_c(w, rng, f"{base}/vendor", span)


def _source_dir(w, rng, folder: str, ext: str, obj, span) -> None:
    for _ in range(rng.randint(1, 12)):
        name = w.ident(rng)
        if ext == ".c" and rng.random() < 0.4:
            w.file(f"{folder}/{name}.h", rng, "source", span)
        else:
            w.file(f"{folder}/{name}{ext}", rng, "source", span, keep=rng.random() < 0.05)
        if obj and rng.random() < 0.5:
            w.file(f"{folder.replace('/src', '/build', 1)}/{name}{obj}", rng, "object", span)
    if ext == ".py":
        w.file(f"{folder}/__init__.py", rng, None, span)  # most are empty
        if rng.random() < 0.5:
            w.file(f"{folder}/__pycache__/{w.ident(rng)}.cpython-311.pyc", rng, "source", span,
                   kind="binary")


def _license(w, rng, rel: str, span) -> None:
    """One of four license texts: the same bytes in every project that uses it."""
    which = rng.choice((0, 0, 1, 1, 2, 3))
    lic = random.Random(f"license:{w.seed}:{which}")
    w.file(rel, rng, None, span, kind="txt", size=1000 + lic.randrange(10000),
           cseed=lic.getrandbits(64))


def _git(w, rng, base: str, span) -> None:
    hooks = random.Random(f"hooks:{w.seed}")  # every repository has the same samples
    for hook in HOOKS:
        w.file(f"{base}/hooks/{hook}.sample", rng, None, span, mode=0o755, kind="sh",
               size=400 + hooks.randrange(4000), cseed=hooks.getrandbits(64))
    w.file(f"{base}/HEAD", rng, None, span, kind="conf", size=23, cseed=0)
    w.file(f"{base}/config", rng, "tiny", span, kind="conf")
    w.file(f"{base}/refs/heads/main", rng, None, span, kind="compressed", size=41)
    w.file(f"{base}/logs/HEAD", rng, "data", span, kind="log")
    w.mkdir(f"{base}/refs/tags")
    w.mkdir(f"{base}/objects/info")
    for _ in range(rng.randint(3, 40)):
        name = "%040x" % rng.getrandbits(160)
        w.file(f"{base}/objects/{name[:2]}/{name[2:]}", rng, "gitobj", span, mode=0o444,
               kind="compressed")
    if rng.random() < 0.6:
        name = "pack-%040x" % rng.getrandbits(160)
        w.file(f"{base}/objects/pack/{name}.pack", rng, "archive", span, mode=0o444)
        w.file(f"{base}/objects/pack/{name}.idx", rng, "tiny", span, mode=0o444)


# ----------------------------------------------------------------------- dependencies

def _npm_package(w, pseed: int, parent: str, span, depth: int) -> None:
    """One node_modules package; all of it from pseed (a vendored copy is identical)."""
    rng = random.Random(pseed)
    name = w.word(rng) + rng.choice(("", "", "-js", "-" + w.word(rng)))
    base = f"{parent}/{name}"
    span = w.span(rng)
    w.file(f"{base}/package.json", rng, "tiny", span, kind="json")
    w.file(f"{base}/README.md", rng, "tiny", span)
    _license(w, rng, f"{base}/LICENSE", span)
    for _ in range(int(rng.lognormvariate(2.0, 1.0))):
        sub = rng.choice(("lib", "lib", "src", "dist", "lib/" + w.word(rng)))
        kind = rng.choice((".js", ".js", ".js", ".d.ts", ".mjs", ".json", ".map"))
        w.file(f"{base}/{sub}/{w.ident(rng)}{kind}", rng, "tiny", span)
    if rng.random() < 0.2:
        w.file(f"{base}/bin/{name}.js", rng, "tiny", span, mode=0o755, kind="js")
        w.symlink(f"{parent}/.bin/{name}", f"../{name}/bin/{name}.js")
    if depth == 0 and rng.random() < 0.1:
        for _ in range(rng.randint(1, 3)):  # nested versions, often a copy of one seen before
            seen = w.npm_seen and rng.random() < 0.5
            nested = rng.choice(w.npm_seen) if seen else rng.getrandbits(64)
            _npm_package(w, nested, f"{base}/node_modules", span, depth + 1)
    if len(w.npm_seen) < 256:
        w.npm_seen.append(pseed)


def _py_package(w, pseed: int, site: str, span) -> None:
    rng = random.Random(pseed)
    if w.py_seen and rng.random() < 0.05:  # the same library in another project's environment
        rng = random.Random(rng.choice(w.py_seen))
    name = w.ident(rng)
    span = w.span(rng)
    folders = [f"{site}/{name}"]
    for _ in range(max(1, int(rng.lognormvariate(2.2, 1.0)))):
        folder = rng.choice(folders)
        if rng.random() < 0.15 and folder.count("/") < site.count("/") + 4:
            folder = f"{folder}/{w.word(rng)}"
            folders.append(folder)
            w.file(f"{folder}/__init__.py", rng, "tiny" if rng.random() < 0.4 else None, span)
        module = w.ident(rng)
        w.file(f"{folder}/{module}.py", rng, "source", span)
        w.file(f"{folder}/__pycache__/{module}.cpython-311.pyc", rng, "source", span,
               kind="binary")
    if rng.random() < 0.1:
        w.file(f"{folders[0]}/_{name}.cpython-311-x86_64-linux-gnu.so", rng, "object", span,
               mode=0o755)
    info = f"{site}/{name}-{rng.randint(0, 9)}.{rng.randint(0, 30)}.{rng.randint(0, 9)}.dist-info"
    for meta, cls in (("METADATA", "doc"), ("RECORD", "tiny"), ("WHEEL", "tiny"),
                      ("top_level.txt", "tiny")):
        w.file(f"{info}/{meta}", rng, cls, span, kind="txt")
    _license(w, rng, f"{info}/LICENSE", span)
    if len(w.py_seen) < 256:
        w.py_seen.append(pseed)


def _vendored_c(w, rng, parent: str, span) -> None:
    lib = f"{parent}/{w.word(rng)}"
    for _ in range(rng.randint(3, 30)):
        w.file(f"{lib}/{w.ident(rng)}{rng.choice(('.c', '.h'))}", rng, "source", span,
               keep=True)


# ------------------------------------------------------------------------ home areas

def _documents(w, rng) -> None:
    topics = [w.word(rng) for _ in range(12)]
    while True:
        span = w.span(rng)
        folder = f"Documents/{rng.choice(topics)}"
        if rng.random() < 0.5:
            folder += f"/{rng.randint(2019, 2026)}"
        private = rng.random() < 0.08
        if private:
            folder += "/private"
        for _ in range(rng.randint(1, 20)):
            r = rng.random()
            stem = "-".join(w.word(rng) for _ in range(rng.randint(1, 3)))
            mode = 0o600 if private else 0o644
            if r < 0.42:
                w.file(f"{folder}/{stem}{rng.choice(('.md', '.txt', '.md', '.tex'))}", rng, "doc",
                       span, mode=mode, keep=True)
            elif r < 0.77:
                w.file(f"{folder}/{stem}{rng.choice(('.csv', '.json', '.log'))}", rng, "data",
                       span, mode=mode, keep=True)
            elif r < 0.97:
                w.file(f"{folder}/{stem}{rng.choice(('.pdf', '.docx', '.xlsx', '.odt'))}", rng,
                       "archive", span, mode=mode, keep=True)
            else:
                w.copy_of(folder, rng, span)
        if rng.random() < 0.05:
            w.mkdir(f"{folder}/{w.word(rng)}")  # an empty folder, made and never used


def _dotfiles(w, rng) -> None:
    span = w.span(rng)
    for name in (".bashrc", ".profile", ".gitconfig", ".vimrc"):
        w.file(name, rng, "tiny", span, kind="sh" if name != ".gitconfig" else "conf")
    w.file(".ssh/config", rng, "tiny", span, mode=0o600, kind="conf")
    w.file(".ssh/id_ed25519", rng, None, span, mode=0o600, kind="txt", size=411)
    w.file(".ssh/id_ed25519.pub", rng, None, span, kind="txt", size=98)
    w.file(".ssh/known_hosts", rng, "tiny", span, kind="txt")
    apps = [w.word(rng) for _ in range(16)]
    while True:
        app = rng.choice(apps)
        span = w.span(rng)
        r = rng.random()
        if r < 0.3:
            for _ in range(rng.randint(1, 6)):
                stem = w.word(rng)
                ext = rng.choice((".json", ".toml", ".ini", ".yaml"))
                w.file(f".config/{app}/{stem}{ext}", rng, "tiny", span)
        elif r < 0.7:
            for _ in range(rng.randint(1, 30)):
                key = "%032x" % rng.getrandbits(128)
                w.file(f".cache/{app}/{key[:2]}/{key}", rng, "tiny", span,
                       kind=rng.choice(("compressed", "binary", "json")))
        elif r < 0.85:
            w.file(f".local/state/{app}/{app}.log", rng, "data", span)
            w.file(f".local/state/{app}/{app}.lock", rng, None, span)
        else:
            w.file(f".local/share/{app}/{w.word(rng)}.sqlite", rng, "object", span)
            if rng.random() < 0.3:
                w.symlink(f".local/share/{app}/current", f"../../../.config/{app}")


def _pictures(w, rng) -> None:
    while True:
        span = w.span(rng)
        year = 2026 - int((ANCHOR - span[0]) // (365 * 86400))
        folder = f"Pictures/{year}/{w.word(rng)}"
        number = rng.randrange(1000, 9000)
        for i in range(rng.randint(3, 40)):
            if rng.random() < 0.85:
                w.file(f"{folder}/IMG_{number + i}.jpg", rng, "photo", span)
            else:
                w.file(f"Pictures/Screenshots/Screenshot-{number + i}.png", rng, "archive", span)


def _downloads(w, rng) -> None:
    while True:
        span = w.span(rng)
        if rng.random() < 0.3:
            w.copy_of("Downloads", rng, span)
        else:
            stem = "-".join(w.word(rng) for _ in range(rng.randint(1, 3)))
            ext = rng.choice((".zip", ".tar.gz", ".pdf", ".deb", ".whl", ".png"))
            w.file(f"Downloads/{stem}-{rng.randint(1, 9)}.{rng.randint(0, 20)}{ext}", rng,
                   "archive", span)


def _media(w, rng) -> None:
    """A few large incompressible files: what is left of the byte budget."""
    left = max(w.target_bytes - w.bytes, int(0.05 * w.target_bytes), 1 << 20)
    count = max(1, min(12, round(left / MEDIA_CHUNK)))
    cuts = sorted(rng.random() for _ in range(count - 1))
    shares = [b - a for a, b in zip([0.0] + cuts, cuts + [1.0])]
    shares = [0.5 / count + 0.5 * s for s in shares]  # no tiny ones
    for i, share in enumerate(shares):
        span = w.span(rng)
        if rng.random() < 0.5:
            rel = f"Videos/{w.word(rng)}-{i}{rng.choice(('.mp4', '.mkv', '.mov'))}"
        else:
            rel = f"Music/{w.word(rng)}/{w.word(rng)}/{i + 1:02d} {w.word(rng)}.flac"
        w.media(rel, rng, int(left * share), span)
