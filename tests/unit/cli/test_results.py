"""Result records (cli/results.py, issue 26): a backup's --json summary and
its text lines come from one typed record, and the benchmarks read that
record back from the JSON line to the same figures the text gives."""
from flud.cli.jsonlines import summary_line
from flud.cli.results import BackupResult, RestoreResult
from flud.client.progress import human_bytes
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


def test_the_bench_reads_the_json_record_to_the_figures_the_text_gives():
    done = BackupResult.from_summary(SUMMARY)
    memory = SUMMARY["memory"]
    text = "\n".join(done.text_lines(n=8) + [
        f"memory: peak per transfer {human_bytes(memory['peak_transfer_bytes'])}, "
        f"process peak RSS {human_bytes(memory['peak_rss'])} "
        f"(static {human_bytes(memory['static_rss'])})"])
    from_text = common.parse_backup(text)
    from_json = common.parse_backup("progress...\n" + summary_line("backup", {"exit": 0,
                                                                               **SUMMARY}))
    assert set(from_json) == set(from_text)
    for key, value in from_json.items():   # the text rounds sizes to 3 digits
        assert abs(value - from_text[key]) <= 0.01 * max(abs(value), 1), key
    assert from_json["sent"] == 10_500_000 and from_json["stores"] == 40


def test_a_restore_result_reads_back_to_the_figures_its_text_gives():
    summary = {"snapshot": 3, "files": 40, "dirs": 5, "symlinks": 1, "bytes": 123_456_789,
               "elapsed": 4.25, "retrieves": 310, "record_retrieves": 9, "beside": 0}
    done = RestoreResult.from_summary(summary)
    from_text = common.parse_restore(done.text_line("/dest"))
    from_json = common.parse_restore(summary_line("restore", {"exit": 0, **summary}))
    assert from_json == {"snapshot": 3, "files": 40, "dirs": 5, "bytes": 123_456_789,
                         "elapsed": 4.25, "retrieves": 319}
    assert set(from_text) == set(from_json)
    for key, value in from_json.items():
        assert abs(value - from_text[key]) <= 0.01 * value, key
