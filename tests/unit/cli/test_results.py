"""Result records (cli/results.py, issue 26): a backup's --json summary and
its text lines come from one typed record, and the benchmarks read that
record back from the JSON line to the same figures the text gives."""
from flud.cli.jsonlines import summary_line
from flud.cli.results import BackupResult, RestoreResult
from tools.bench import common

SUMMARY = {"snapshot": 7, "files": 1200, "bytes": 5_000_000, "new": 1000, "changed": 150,
           "unchanged": 50, "skipped": 0, "dedup": 3, "excluded": 2, "bytes_read": 5_000_000,
           "bytes_sent": 10_500_000, "stores": 40, "tars": 12, "elapsed": 2.5,
           "format": 2, "roots": ["/src"],
           "memory": {"peak_transfer_bytes": 4_000_000, "peak_rss": 90_000_000,
                      "static_rss": 60_000_000}}


def test_the_text_and_the_json_are_one_record():
    done = BackupResult.from_summary(SUMMARY)
    assert done.snapshot == 7 and done.bytes_sent == 10_500_000 and done.bytes_known == 0
    text = done.text_lines(n=8)
    assert text[0] == ("snapshot 7: 1200 files (1000 new, 150 changed, 50 unchanged, "
                       "0 skipped, 3 deduplicated, 2 excluded)")
    assert len(text) == 2   # nothing known before, no reduced redundancy: no more lines
    assert BackupResult.from_summary(done.to_json()) == done


def test_the_bench_reads_the_json_record_and_no_text():
    done = BackupResult.from_summary(SUMMARY)
    from_json = common.parse_backup("progress...\n" + summary_line("backup", {"exit": 0,
                                                                               **SUMMARY}))
    assert from_json == {"snapshot": 7, "files": 1200, "new": 1000, "changed": 150,
                         "unchanged": 50, "skipped": 0, "read": 5_000_000,
                         "sent": 10_500_000, "stores": 40, "tars": 12, "elapsed": 2.5,
                         "peak_transfer": 4_000_000, "peak_rss": 90_000_000,
                         "static_rss": 60_000_000}
    # the human text is for people: a run without --json gives the bench nothing
    assert common.parse_backup("\n".join(done.text_lines(n=8))) == {}


def test_a_restore_result_reads_back_from_its_json_line():
    summary = {"snapshot": 3, "files": 40, "dirs": 5, "symlinks": 1, "bytes": 123_456_789,
               "elapsed": 4.25, "retrieves": 310, "record_retrieves": 9, "beside": 0}
    done = RestoreResult.from_summary(summary)
    assert done.text_line("/dest").startswith("restored snapshot 3 to /dest: 40 files")
    from_json = common.parse_restore(summary_line("restore", {"exit": 0, **summary}))
    assert from_json == {"snapshot": 3, "files": 40, "dirs": 5, "bytes": 123_456_789,
                         "elapsed": 4.25, "retrieves": 319}
    assert common.parse_restore(done.text_line("/dest")) == {}


def test_verify_prune_and_check_results_survive_their_json_line():
    """What --json prints of verify, prune and check reads back to the
    same record (the benchmarks and scripts rely on that)."""
    import json

    from flud.cli.results import CheckResult, PruneResult, VerifyResult

    verify = VerifyResult(snapshot=4, full=False, round=9,
                          totals={"confirmed": 30, "missing": 1},
                          nodes={"ab" * 20: {"confirmed": 30, "missing": 1}},
                          bad=[{"node": "ab" * 20, "share": "cd" * 32, "what": "missing"}])
    line = json.loads(summary_line("verify", {"exit": 1, **verify.to_json()}))
    assert VerifyResult.from_summary(line) == VerifyResult.from_summary(verify.to_json())
    assert "root_unconfirmed" not in line and line["bad"][0]["what"] == "missing"
    assert VerifyResult.from_summary(line).to_json() == verify.to_json()

    prune = PruneResult(snapshots=3, live_bytes=1000, live_extent_bytes=500, deleted=7,
                        shares_deleted=56, bytes_freed=2_500_000, repacked_bundles=2,
                        repacked_members=9, mostly_dead_bundles=2)
    assert prune.text_line() == ("prune done: 7 objects deleted, 56 shares, 2.5 MB freed on "
                                 "the nodes; 0 pending; 9 members of 2 bundles repacked")
    text = summary_line("prune", {"exit": 0, "prune": prune.to_json(),
                                  "memory": SUMMARY["memory"]})
    assert PruneResult.from_summary(json.loads(text)["prune"]) == prune
    read = common.parse_prune("prune: reading...\n" + text)
    assert (read["reached"], read["freed"], read["mostly_dead_bundles"]) == \
        (1500, 2_500_000, 2)
    assert read["static_rss"] == 60_000_000
    assert common.parse_prune(prune.text_line()) == {}

    report = {"counts": {"healthy": 5, "degraded": 1}, "window": 0.25, "challenged": 40,
              "downloaded": 2, "recreated": {"shares": 1, "bytes": 4096},
              "fetched_bytes": 16384, "objects": [{"id": "ef" * 32, "state": "degraded"}],
              "nodes": [{"node": "ab" * 20, "reachable": True}], "moved": {}, "surplus": [],
              "unconfirmed": "2 of 5 holders answered"}
    check = CheckResult.from_summary(report)
    line = json.loads(summary_line("check", {"exit": 1, **check.to_json()}))
    assert CheckResult.from_summary(line) == check
    assert line["unconfirmed"] == "2 of 5 holders answered"
    assert "unconfirmed" not in CheckResult.from_summary({**report, "unconfirmed": ""}).to_json()
