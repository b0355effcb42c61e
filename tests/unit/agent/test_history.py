"""The run history: crash-safe lines, a torn line skipped, bounded by rotation."""
import json

from flud.agent.history import History


def test_records_read_back_in_order_and_give_the_last_starts(tmp_path):
    h = History(str(tmp_path), keep=5)
    h.append({"job": "backup", "start": 1.0, "end": 2.0, "exit": 0, "summary": {"snapshot": 1}})
    h.append({"job": "verify", "start": 3.0, "end": 4.0, "exit": 0, "summary": None})
    h.append({"job": "backup", "start": 5.0, "end": 6.0, "exit": 0, "summary": {"snapshot": 2}})
    assert [r["start"] for r in h.read()] == [1.0, 3.0, 5.0]
    assert h.last_starts() == {"backup": 5.0, "verify": 3.0}


def test_a_torn_last_line_is_skipped_and_the_next_record_is_whole(tmp_path):
    h = History(str(tmp_path))
    h.append({"job": "backup", "start": 1.0})
    with open(h.path, "a") as f:
        f.write('{"job": "backup", "sta')   # the crash, mid-write
    assert len(History(str(tmp_path)).read()) == 1
    History(str(tmp_path)).append({"job": "verify", "start": 2.0})
    assert [r["job"] for r in History(str(tmp_path)).read()] == ["backup", "verify"]


def test_the_file_stays_bounded_keeping_the_newest_of_each_job(tmp_path):
    h = History(str(tmp_path), keep=3)
    h.append({"job": "verify", "start": -1.0})
    for i in range(100):
        h.append({"job": "backup", "start": float(i)})
    records = h.read()
    assert len(records) <= 2 * 3 * 2
    backups = [r["start"] for r in records if r["job"] == "backup"]
    assert backups[-1] == 99.0 and backups == sorted(backups)
    assert [r for r in records if r["job"] == "verify"]   # the rare job kept its run
    with open(h.path) as f:
        assert all(json.loads(line) for line in f)


def test_a_huge_summary_is_cut_to_its_essentials(tmp_path):
    h = History(str(tmp_path))
    h.append({"job": "backup", "start": 1.0, "exit": 0, "summary": {"x": "y" * 100000}})
    (record,) = h.read()
    assert record["truncated"] and record["summary"] is None and record["exit"] == 0


def test_a_reread_of_an_unchanged_file_is_not_parsed_again(tmp_path, monkeypatch):
    h = History(str(tmp_path))
    h.append({"job": "backup", "start": 1.0})
    first = h.read()
    parsed = []
    monkeypatch.setattr(History, "_parse", staticmethod(lambda raw: parsed.append(raw) or []))
    assert h.read() == first and parsed == []
    h.append({"job": "verify", "start": 2.0})
    h.read()
    assert len(parsed) == 1   # the file changed: read again


def test_long_lists_in_a_summary_are_cut_and_counted(tmp_path):
    h = History(str(tmp_path))
    objects = [{"id": f"{i:064x}", "state": "degraded"} for i in range(1000)]
    h.append({"job": "check", "start": 1.0, "exit": 1,
              "summary": {"counts": {"healthy": 5, "degraded": 1000}, "objects": objects,
                          "recreated": {"bytes": 1, "list": list(range(500))}}})
    (record,) = h.read()
    summary = record["summary"]
    assert summary["counts"] == {"healthy": 5, "degraded": 1000}
    assert len(summary["objects"]) == 100 and summary["objects_count"] == 1000
    assert summary["recreated"]["list_count"] == 500 and "truncated" not in record
