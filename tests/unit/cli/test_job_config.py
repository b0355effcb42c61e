"""Each client command's options become one typed record, read once from
the command line (cli/job_config.py, issue 26): what a command leaves out
is the record's default, and the job runners read nothing else."""
from flud.cli.job_config import RestoreConfig, RunConfig
from flud.cli.main import build_parser
from flud.memory import DEFAULT_BUDGET


def test_a_restore_command_line_becomes_its_typed_records():
    args = build_parser().parse_args(
        ["restore", "--home", "/h", "--to", "/dest", "--overwrite", "if-newer", "--delete",
         "--include", "*.txt", "--exclude", "tmp/", "--memory-budget", "32M", "--json",
         "docs", "notes"])
    run = RunConfig.from_args(args)
    assert run.as_json and run.memory_budget == 32 * 1024 * 1024
    assert run.budget_bytes() == 32 * 1024 * 1024 and not run.lock_held
    restore = RestoreConfig.from_args(args)
    assert restore == RestoreConfig(to="/dest", paths=("docs", "notes"), snapshot=None,
                                    overwrite="if-newer", include=("*.txt",),
                                    exclude=("tmp/",), dry_run=False, delete=True,
                                    numeric_ids=False)
    assert restore.steer == {"overwrite": "if-newer"}


def test_options_a_command_does_not_have_are_the_records_defaults():
    args = build_parser().parse_args(["ls", "--home", "/h"])
    run = RunConfig.from_args(args)
    assert run == RunConfig(as_json=run.as_json)
    assert run.budget_bytes() == DEFAULT_BUDGET and run.upload_limit == run.download_limit == 0
