"""A snapshot's names for paths: the top-level names under DEST (the
backed-up roots' base names, made unique), and the paths a user named,
as the snapshot names them."""
import os


def root_names(roots) -> list:
    """Top-level names under DEST: the roots' base names, made unique."""
    names, seen = [], set()
    for i, root in enumerate(roots):
        name = os.path.basename(os.path.abspath(root).rstrip("/")) or "root"
        if name in seen:
            name = f"{name}-{i}"
        seen.add(name)
        names.append(name)
    return names


def snapshot_paths(roots, paths) -> list:
    """The paths a user named, as the snapshot names them: an absolute path
    under a backed-up root (`/home/me/docs/x`, backed up as `/home/me/docs`)
    becomes the name under DEST (`docs/x`); other paths are kept as given."""
    bases = [(os.path.abspath(r).rstrip("/") or "/", n) for r, n in zip(roots, root_names(roots))]
    named = []
    for path in paths:
        if os.path.isabs(path):
            path = os.path.normpath(path)
            for base, name in bases:
                if path == base or path.startswith(base.rstrip("/") + "/"):
                    path = name + path[len(base.rstrip("/")):]
                    break
        named.append(path)
    return named
