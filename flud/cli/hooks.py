"""`flud backup --hooks`: agent.toml's [hooks] around a backup run by hand,
as the agent runs them (flud/agent/hooks.py says what each hook sees and
what essential means), here without a reactor: one process after another."""
import subprocess
import sys

from flud.cli.exits import EXIT_ERROR, EXIT_OK

OUTPUT_TAIL = 2000


def run_hook(hook, env) -> str:
    """'' when the hook succeeded, else why it failed."""
    print(f"hook {hook.name}: {hook.command}", file=sys.stderr)
    try:
        done = subprocess.run(["/bin/sh", "-c", hook.command], env=env, timeout=hook.timeout,
                              stdin=subprocess.DEVNULL, stdout=sys.stderr,
                              stderr=subprocess.PIPE, check=False)
    except subprocess.TimeoutExpired:
        return f"{hook.name} hook still running after its timeout ({hook.timeout:g} s)"
    except OSError as err:
        return f"{hook.name} hook could not start: {err}"
    if done.returncode == 0:
        return ""
    output = done.stderr.decode("utf-8", "replace").strip()[-OUTPUT_TAIL:]
    return f"{hook.name} hook failed (exit {done.returncode})" + (f": {output}" if output else "")


def backup_with_hooks(args, run) -> int:
    """run() the backup between before_backup and after_backup; on_error
    when it (or an essential hook) failed."""
    from flud.agent.config import ConfigError, load
    from flud.agent.hooks import hook_environment
    from flud.client.home import ClientHome, HomeError

    try:
        home = ClientHome(args.home).path
        hooks = load(home).hooks
    except (HomeError, ConfigError) as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_ERROR

    def on_error(code, why, snapshot=None):
        hook = hooks.get("on_error")
        if hook is not None:
            failed = run_hook(hook, hook_environment(hook, "backup", home, code, snapshot, why))
            if failed:
                print(f"warning: {failed}", file=sys.stderr)

    before = hooks.get("before_backup")
    if before is not None:
        failed = run_hook(before, hook_environment(before, "backup", home))
        if failed and before.essential:
            print(f"error: {failed}; the backup did not run", file=sys.stderr)
            on_error(None, failed)
            return EXIT_ERROR
        if failed:
            print(f"warning: {failed} (optional: the backup goes on)", file=sys.stderr)
    code = run()
    summary = vars(args).get("summary") or {}
    snapshot = summary.get("snapshot")
    if code != EXIT_OK:
        error = summary.get("error") if isinstance(summary.get("error"), dict) else {}
        on_error(code, error.get("message") or f"exit {code}", snapshot)
        return code
    after = hooks.get("after_backup")
    if after is not None:
        failed = run_hook(after, hook_environment(after, "backup", home, code, snapshot))
        if failed and after.essential:
            print(f"error: {failed}", file=sys.stderr)
            on_error(EXIT_ERROR, failed, snapshot)
            return EXIT_ERROR
        if failed:
            print(f"warning: {failed} (optional)", file=sys.stderr)
    return code
