"""A head never goes back; one key, one writer (docs/snapshots.md, "Root
record"). Pure decisions, no I/O: given the head this home saved last and
the root the nodes answered with, may this home write the next head?

Every root names the home that wrote it (a random id made at init) and the
digest of the root it replaced. A home keeps the root it wrote or adopted
last. The nodes' root is then one of:

- the same root: write on;
- one this home wrote right after its own (chained to it) that the home did
  not get to save (killed between ROOT_PUT and saving, or a put that did
  not reach a majority): take it, write on;
- older than this home's (the nodes holding the newest are away, or a node
  replays an old, authentic root): STALE_ROOT, never written over;
- another of the same generation, or one this home wrote that does not
  chain to what it saved (its index was copied back): FORKED_HEAD;
- newer, written by another home (a home made from the exported key, or
  one that ran `flud adopt`): OTHER_WRITER, until this home adopts.

Roots and saved heads from before the chain (no home id, no digest) are
compared by generation alone, as they were.
"""
import json

from flud.client.repository.holder_map import RootRecord
from flud.client.run_rows import REPO_META
from flud.errors import FludError

SAME, AHEAD, LEGACY, FIRST = "same", "ahead", "legacy", "first"
# REPO_META: the index's copy of the repository head (a meta key of the
# local index, run_rows.py; client/repository/head.py writes it)
# The generation of the last root this home sent (meta key): a put that did
# not reach a majority may still sit on a few nodes, so the next root this
# home writes is newer than it and never ties with it.
ATTEMPT_META = "root_attempt"
# The newest root of another home this home was refused by (meta key; set
# until `flud adopt`): once superseded, a home stays so. Without it, a later
# view in which the new writer's root is missing (its holders away, a home
# set changed by nodes gone for good, and one node replaying an old root:
# the lifecycle simulation, seed 92309) shows this home its own head again,
# and it would write a fork the head never lists.
SUPERSEDED_META = "superseded_by"


class HeadError(FludError):
    """The nodes' head is not one this home may write after."""

    code = "HEAD"


class StaleRoot(HeadError):
    code = "STALE_ROOT"


class ForkedHead(HeadError):
    code = "FORKED_HEAD"


class OtherWriter(ForkedHead):
    code = "OTHER_WRITER"


_NOTHING_CHANGED = "Nothing was changed or deleted."


def _gen(root) -> str:
    return f"generation {root.generation}" + (f" (home {root.home[:8]})" if root.home else "")


class Saved:
    """Of the head this home saved: its generation (0: none), its root
    (None: none, or saved before the chain), whether there is one."""

    def __init__(self, client_index):
        saved = client_index.get_meta(REPO_META)
        self.present = bool(saved)
        self.generation = saved["generation"] if saved else 0
        root = saved.get("root") if saved else None
        self.root = RootRecord.decode(json.dumps(root).encode()) if root else None
        # a version-1 home (snapshots, no head saved): nothing to compare, as before
        self.legacy = not saved and bool(client_index.snapshots())


def judge_home(ctx, found) -> str:
    """judge() of the nodes' root against the head ctx's home saved."""
    saved = Saved(ctx.index)
    if saved.legacy:
        return LEGACY
    verdict = judge_remembered(ctx, saved.generation, saved.root, found)
    refuse_superseded(ctx.index, saved.generation, ctx.home.path)
    return verdict


def judge_remembered(ctx, saved_generation: int, saved_root, found) -> str:
    """judge(), remembering (SUPERSEDED_META) the other home's root it is
    refused by."""
    try:
        return judge(saved_generation, saved_root, found, ctx.home.home_id, ctx.home.path)
    except OtherWriter:
        if isinstance(found, RootRecord) and found.home != ctx.home.home_id:
            known = ctx.index.get_meta(SUPERSEDED_META)
            if not known or known["generation"] < found.generation:
                ctx.index.set_meta(SUPERSEDED_META, {"home": found.home,
                                                     "generation": found.generation})
        raise


def superseded_by(client_index):
    """{"home", "generation"} of the other home's root this home was refused
    by (until it adopts), or None."""
    return client_index.get_meta(SUPERSEDED_META) or None


def refuse_superseded(client_index, saved_generation: int, home_path: str = "H") -> None:
    """OtherWriter if another home has taken over from this one (it met
    that home's root before), whatever the nodes it hears now answer."""
    other = superseded_by(client_index)
    if other:
        raise OtherWriter(
            f"another home with this key (home {other['home'][:8]}) has written the head "
            f"(generation {other['generation']}) since this home did (generation "
            f"{saved_generation}): that home is the writer now, even where the nodes that "
            f"answer now do not show its root (they are away, or answer with an old one). "
            f"{_NOTHING_CHANGED} {_handover(home_path)}")


def judge(saved_generation: int, saved_root, found, home_id: str, home_path: str = "H") -> str:
    """How the nodes' root `found` (a RootRecord, a version-1 root dict, or
    None when no node answered with one) stands to this home's saved head
    (its generation, 0 for none; its RootRecord, None if saved before the
    chain). Returns SAME, AHEAD (this home's own next root: take it), LEGACY
    (no chain to compare: as before) or FIRST (nothing on either side);
    raises StaleRoot, ForkedHead or OtherWriter."""
    if not isinstance(found, RootRecord):
        if saved_generation == 0:
            return FIRST
        what = "no root record" if found is None else "only a version-1 root record"
        raise StaleRoot(
            f"the nodes that answered hold {what}, but this home last wrote the head at "
            f"generation {saved_generation}: the nodes holding it are away. {_NOTHING_CHANGED} "
            f"Run it again when more nodes are up. {_older(home_path)}")
    if saved_root is not None and found.digest() == saved_root.digest():
        return SAME
    if found.generation < saved_generation:
        raise StaleRoot(
            f"the newest root the nodes answered with is {_gen(found)}, older than the head "
            f"this home wrote last (generation {saved_generation}): the nodes holding the "
            f"newest are away, or a node answered with an old root. {_NOTHING_CHANGED} Run "
            f"it again when more nodes are up; `flud ls` and `flud restore` read this "
            f"home's own head meanwhile. {_older(home_path)}")
    if saved_generation == 0 and saved_root is None:
        return _first_sight(found, home_id, home_path)
    if saved_root is None:   # saved before the chain: generations alone, as before
        if found.home in ("", home_id):
            return LEGACY
        raise _other(found, saved_generation, home_path)
    if found.generation == saved_generation:
        # a repair root (RootRecord.repairs): the same generation with a
        # repair page more. This home's own, chained to what it saved:
        # take it; one with fewer repairs than this home's: an older root
        if found.repairs < saved_root.repairs:
            raise StaleRoot(
                f"the newest root the nodes answered with is {_gen(found)} before {_reps(saved_root)}"
                f" this home recorded: the nodes holding the newest are away. "
                f"{_NOTHING_CHANGED} Run it again when more nodes are up. {_older(home_path)}")
        if found.repairs > saved_root.repairs and found.home == home_id \
                and found.prev == saved_root.digest():
            return AHEAD
        raise ForkedHead(
            f"the nodes hold another head of generation {found.generation} than the one this "
            f"home wrote: two homes wrote with this key. {_NOTHING_CHANGED} {_handover(home_path)}")
    if found.home == home_id:
        if found.prev == saved_root.digest():
            return AHEAD
        raise ForkedHead(
            f"the nodes hold a head this home wrote ({_gen(found)}) that does not follow the "
            f"one it saved (generation {saved_generation}): this home's index is older than "
            f"its head (copied back?). {_NOTHING_CHANGED} `flud adopt --home {home_path}` "
            f"takes the nodes' head.")
    raise _other(found, saved_generation, home_path)


def _first_sight(found: RootRecord, home_id: str, home_path: str) -> str:
    """A home with no head of its own (new, or made from the exported key)
    meets a repository: its own (its index was lost) or another home's."""
    if found.home == home_id:
        return AHEAD
    raise OtherWriter(
        f"the nodes hold a repository written by another home with this key "
        f"({_gen(found)}); this home has written nothing yet. It reads (`flud ls`, "
        f"`flud restore`) but does not write: two homes writing with one key would "
        f"overwrite each other's head and prune each other's data. {_NOTHING_CHANGED} "
        f"If this home is to take over (the other machine is lost or retired), run "
        f"`flud adopt --home {home_path}`; the other home's backups are refused from then on.")


def _other(found: RootRecord, saved_generation: int, home_path: str) -> OtherWriter:
    who = f"home {found.home[:8]}" if found.home else "a home with an older flud"
    return OtherWriter(
        f"another home with this key ({who}) has written the head since this home did "
        f"(the nodes are at generation {found.generation}, this home wrote generation "
        f"{saved_generation}): that home is the writer now. {_NOTHING_CHANGED} "
        f"{_handover(home_path)}")


def _reps(root) -> str:
    return f"the {root.repairs} repair page(s)" if root.repairs else "a repair page"


def _older(home_path: str) -> str:
    return (f"If those nodes are gone for good, `flud adopt --home {home_path} "
            f"--accept-older` takes what the nodes hold (the snapshots after it are lost).")


def _handover(home_path: str) -> str:
    return (f"One key has one writer: stop backups on the other machine, then run "
            f"`flud adopt --home {home_path}` on the one that should write (it takes the "
            f"nodes' head and rebuilds its index from it).")
