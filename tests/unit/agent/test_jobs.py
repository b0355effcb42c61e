"""The job table: each job's command line comes from agent.toml."""
from flud.agent.config import parse
from flud.agent.jobs import command_line, job_states, scheduled


def test_backup_and_verify_command_lines_come_from_the_config():
    config = parse('[backup]\npaths = ["/d/a", "/d/b c"]\nexclude = ["*.tmp"]\n'
                   '[limits]\nupload = "2M"\ndownload = 100\n')
    argv = command_line("backup", config, "/h", python="py")
    assert argv == ["py", "-m", "flud", "backup", "/d/a", "/d/b c", "--exclude", "*.tmp",
                    "--exclude-caches",   # on by default in agent.toml
                    "--home", "/h", "--json", "--limit-upload", "2048", "--limit-download", "100"]
    assert command_line("verify", config, "/h", python="py")[3:] == [
        "verify", "--home", "/h", "--json", "--limit-upload", "2048", "--limit-download", "100"]


def test_every_exclude_option_reaches_the_backup_command_line():
    config = parse('[backup]\npaths = ["/d"]\nexclude_file = ["/e/one", "/e/two"]\n'
                   'exclude_caches = false\nexclude_if_present = [".nobackup"]\n'
                   'one_file_system = true\nexclude_larger_than = "2G"\n')
    assert command_line("backup", config, "/h", python="py")[3:-3] == [
        "backup", "/d", "--exclude-file", "/e/one", "--exclude-file", "/e/two",
        "--exclude-if-present", ".nobackup", "--one-file-system",
        "--exclude-larger-than", "2G"]
    # and the command line they make is one `flud backup` takes
    from flud.cli.main import build_parser
    args = build_parser().parse_args(command_line("backup", config, "/h", python="py")[3:])
    assert (args.exclude_file, args.exclude_if_present, args.one_file_system,
            args.exclude_larger_than, args.exclude_caches) == (
        ["/e/one", "/e/two"], [".nobackup"], True, 2 * 1024 ** 3, False)


def test_check_and_forget_command_lines():
    config = parse('[check]\nenabled = true\n[forget]\nenabled = true\nkeep_last = 3\n')
    assert command_line("check", config, "/h", python="py")[3:5] == ["check", "--repair"]
    subset = parse('[check]\nrepair = false\nread_data_subset = "1/7"\n')
    assert command_line("check", subset, "/h", python="py")[3:6] == [
        "check", "--read-data-subset", "1/7"]
    assert command_line("forget", config, "/h", python="py")[3:] == [
        "forget", "--keep-last", "3", "--keep-daily", "7", "--keep-weekly", "4",
        "--keep-monthly", "12", "--prune", "--home", "/h", "--json"]
    states = job_states(config)
    assert states["check"] is None and states["forget"] is None


def test_only_runnable_jobs_are_scheduled():
    states = job_states(parse("[verify]\nenabled = false\n"))
    assert "no paths" in states["backup"] and "disabled" in states["verify"]
    assert scheduled(parse('[backup]\npaths = ["/x"]\nat = "03:00"\n')) == {
        "backup": (None, (3, 0)), "verify": (86400.0, None), "check": (86400.0, None)}
