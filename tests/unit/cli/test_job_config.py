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


_PARSER = []


def _parsed(*argv):
    if not _PARSER:   # built once: argparse parses any number of command lines
        _PARSER.append(build_parser())
    return _PARSER[0].parse_args(list(argv))


def test_every_client_command_line_becomes_its_typed_record():
    from flud.cli.job_config import (AdoptConfig, BackupConfig, BrowseConfig, CheckConfig,
                                     DumpConfig, ForgetConfig, PruneConfig, TagConfig,
                                     VerifyConfig)

    backup = BackupConfig.from_args(_parsed("backup", "--home", "/h", "--tag", "daily",
                                            "--exclude", "*.o", "--one-file-system",
                                            "--parallel-files", "3", "/src"))
    assert (backup.paths, backup.tags, backup.parallel_files) == (("/src",), ("daily",), 3)
    assert backup.excludes.globs == ("*.o",) and backup.excludes.one_file_system
    assert backup.stream is None
    assert VerifyConfig.from_args(_parsed("verify", "--home", "/h", "--sample", "0.25",
                                          "--full")) == VerifyConfig(None, 0.25, True)
    assert PruneConfig.from_args(_parsed("prune", "--home", "/h", "--grace", "2h",
                                         "--max-unused", "30", "--dry-run")) == \
        PruneConfig(grace=7200, max_unused=30, dry_run=True)
    forget = ForgetConfig.from_args(_parsed("forget", "--home", "/h", "--keep-last", "3",
                                            "--keep-daily", "7", "--prune", "--grace", "0"))
    assert (forget.policy.last, forget.policy.daily) == (3, 7)
    assert forget.prune == PruneConfig(grace=0, max_unused=50, dry_run=False)
    assert ForgetConfig.from_args(_parsed("forget", "--home", "/h", "4")).prune is None
    assert TagConfig.from_args(_parsed("tag", "--home", "/h", "2", "3", "--add", "keep",
                                       "--protect")) == \
        TagConfig(snapshots=(2, 3), add=("keep",), remove=(), protect=True)
    check = CheckConfig.from_args(_parsed("check", "--home", "/h", "--repair",
                                          "--read-data-subset", "2/7", "--repair-below", "6"))
    assert check.repair and check.repair_below == 6 and check.subset is not None
    assert check.unreachable_grace == 3 * 24 * 3600 and check.safety_margin is None
    assert BrowseConfig.from_args(_parsed("ls", "--home", "/h", "--snapshot", "4", "docs",
                                          "--json")) == \
        BrowseConfig(snapshot=4, path="docs", as_json=True)
    assert BrowseConfig.from_args(_parsed("diff", "--home", "/h", "1", "2")).new == 2
    assert DumpConfig.from_args(_parsed("dump", "--home", "/h", "/src/a")) == \
        DumpConfig(path="/src/a")
    assert AdoptConfig.from_args(_parsed("adopt", "--home", "/h", "--accept-older")) == \
        AdoptConfig(accept_older=True)


def test_a_wrong_or_empty_command_line_is_a_user_error_before_any_job_runs():
    import pytest

    from flud.cli.exits import UserError
    from flud.cli.job_config import CheckConfig, ForgetConfig, TagConfig

    with pytest.raises(UserError, match="say what to keep"):
        ForgetConfig.from_args(_parsed("forget", "--home", "/h"))
    with pytest.raises(UserError, match="say what to change"):
        TagConfig.from_args(_parsed("tag", "--home", "/h", "2"))
    with pytest.raises(UserError):
        CheckConfig.from_args(_parsed("check", "--home", "/h", "--read-data-subset", "9/7"))


def test_no_client_module_reads_the_command_line():
    """Below cli/ a job takes its typed record: nothing there reads an
    argparse Namespace (`args.x`, getattr(args, ...), vars(args))."""
    import ast
    from pathlib import Path

    client = Path(__file__).resolve().parents[3] / "flud" / "client"
    found = []
    for path in sorted(client.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            name = None
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                name = node.value.id
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                    and node.func.id in ("getattr", "vars") and node.args \
                    and isinstance(node.args[0], ast.Name):
                name = node.args[0].id
            if name == "args":
                found.append(f"{path.relative_to(client)}:{node.lineno}")
    assert found == []
