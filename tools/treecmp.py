"""Compare two trees: contents, file modes, mtimes, symlinks, empty dirs."""
import filecmp
import os
import stat


def compare_trees(a: str, b: str) -> list:
    problems = []
    for dirpath, dirnames, filenames in os.walk(a):
        rel = os.path.relpath(dirpath, a)
        other_dir = os.path.normpath(os.path.join(b, rel))
        if not os.path.isdir(other_dir):
            problems.append(f"missing dir {rel}")
            continue
        for name in dirnames + filenames:
            pa, pb = os.path.join(dirpath, name), os.path.join(other_dir, name)
            sa = os.lstat(pa)
            try:
                sb = os.lstat(pb)
            except FileNotFoundError:
                problems.append(f"missing {os.path.join(rel, name)}")
                continue
            if stat.S_IFMT(sa.st_mode) != stat.S_IFMT(sb.st_mode):
                problems.append(f"type differs {name}")
            elif stat.S_ISLNK(sa.st_mode):
                if os.readlink(pa) != os.readlink(pb):
                    problems.append(f"link target differs {name}")
            elif stat.S_IMODE(sa.st_mode) != stat.S_IMODE(sb.st_mode):
                problems.append(f"mode differs {os.path.join(rel, name)}")
            elif stat.S_ISREG(sa.st_mode):
                if sa.st_mtime_ns != sb.st_mtime_ns:
                    problems.append(f"mtime differs {os.path.join(rel, name)}")
                if not filecmp.cmp(pa, pb, shallow=False):
                    problems.append(f"content differs {os.path.join(rel, name)}")
        extra = set(os.listdir(other_dir)) - set(dirnames + filenames)
        problems.extend(f"extra {os.path.join(rel, x)}" for x in sorted(extra))
    return problems
