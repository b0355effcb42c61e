"""Shell completions (bash, zsh) and the man page, generated from the
argparse parser itself: a new command or option appears in all three
without anyone writing it twice.

    flud completion bash > ~/.local/share/bash-completion/completions/flud
    flud completion zsh  > ~/.zfunc/_flud        (with fpath+=(~/.zfunc))
    flud completion man  > man/flud.1            (`make man`)
"""
import argparse
import datetime
import sys

from flud.cli.exits import EXIT_OK

# Options whose value is a path: completed with file names (directories for DIR).
_PATH_METAVARS = {"FILE", "DIR", "DEST", "HOME", "PATH"}
_PATH_DESTS = {"home", "dir", "to", "file", "memory_log", "import_key", "source",
               "passphrase_file", "new_passphrase_file", "testnet"}


def add_completion_command(sub, root) -> None:
    """root: the whole `flud` parser, which the scripts are made from."""
    completion = sub.add_parser("completion", help="print shell completions or the man page",
                                description="Print a bash or zsh completion script, or the "
                                            "man page (roff), made from this flud's parser.")
    completion.add_argument("shell", choices=("bash", "zsh", "man"))
    completion.set_defaults(handler=cmd_completion, root_parser=root)


def cmd_completion(args) -> int:
    parser = args.root_parser
    text = {"bash": bash_script, "zsh": zsh_script, "man": man_page}[args.shell](parser)
    sys.stdout.write(text)
    return EXIT_OK


# ---- the parser as a table -------------------------------------------------------

class Command:
    def __init__(self, path: tuple, parser, help_text: str = ""):
        self.path = path                # ("key", "export")
        self.parser = parser
        self.help = help_text or parser.description or ""
        self.children = []              # Commands
        self.options = []               # argparse Actions with option strings
        self.positionals = []


def command_tree(parser, path=(), help_text="") -> Command:
    node = Command(path, parser, help_text)
    helps = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                helps[choice.dest] = choice.help or ""
            for name, child in action.choices.items():
                node.children.append(command_tree(child, path + (name,), helps.get(name, "")))
        elif action.option_strings:
            if not isinstance(action, argparse._HelpAction):
                node.options.append(action)
        else:
            node.positionals.append(action)
    return node


def walk(node: Command):
    yield node
    for child in node.children:
        yield from walk(child)


def takes_value(action) -> bool:
    return action.nargs != 0


def value_kind(action) -> str:
    """'choices', 'dir', 'file' or '' (anything)."""
    if action.choices:
        return "choices"
    metavar = str(action.metavar or "")
    if metavar == "DIR" or action.dest in ("dir", "testnet", "to"):
        return "dir"
    if metavar in _PATH_METAVARS or action.dest in _PATH_DESTS:
        return "file"
    return ""


# ---- bash ------------------------------------------------------------------------

def bash_script(parser) -> str:
    tree = command_tree(parser)
    subs, opts, values = [], [], []
    for node in walk(tree):
        key = " ".join(("flud",) + node.path)   # bash allows no empty key
        if node.children:
            subs.append(f'    ["{key}"]="{" ".join(c.path[-1] for c in node.children)}"')
        words = [str(c) for a in node.positionals if a.choices and not node.children
                 for c in a.choices]
        if words:
            subs.append(f'    ["{key}"]="{" ".join(words)}"')
        flags = [flag for action in node.options for flag in action.option_strings]
        opts.append(f'    ["{key}"]="{" ".join(flags + ["--help"])}"')
        for action in node.options:
            if not takes_value(action):
                continue
            kind = value_kind(action)
            word = ("choices:" + " ".join(map(str, action.choices))) if kind == "choices" else kind
            for flag in action.option_strings:
                values.append(f'    ["{key}|{flag}"]="{word or "any"}"')
    return _BASH.format(subs="\n".join(subs), opts="\n".join(opts), values="\n".join(values))


_BASH = """\
# bash completion for flud (made by `flud completion bash`)
declare -gA _flud_subs=(
{subs}
)
declare -gA _flud_opts=(
{opts}
)
declare -gA _flud_values=(
{values}
)

_flud() {{
    local cur="${{COMP_WORDS[COMP_CWORD]}}" prev="${{COMP_WORDS[COMP_CWORD-1]}}"
    local path="flud" word i
    for ((i = 1; i < COMP_CWORD; i++)); do
        word="${{COMP_WORDS[i]}}"
        if [[ -n "${{_flud_subs[$path]}}" && " ${{_flud_subs[$path]}} " == *" $word "* ]]; then
            path="$path $word"
        fi
    done
    local kind="${{_flud_values[$path|$prev]}}"
    if [[ -n "$kind" ]]; then
        case "$kind" in
            choices:*) COMPREPLY=($(compgen -W "${{kind#choices:}}" -- "$cur")) ;;
            dir) COMPREPLY=($(compgen -d -- "$cur")) ;;
            file) COMPREPLY=($(compgen -f -- "$cur")) ;;
            *) COMPREPLY=() ;;
        esac
        return
    fi
    if [[ "$cur" == -* ]]; then
        COMPREPLY=($(compgen -W "${{_flud_opts[$path]}}" -- "$cur"))
    elif [[ -n "${{_flud_subs[$path]}}" ]]; then
        COMPREPLY=($(compgen -W "${{_flud_subs[$path]}}" -- "$cur"))
    else
        COMPREPLY=($(compgen -f -- "$cur"))
    fi
}}
complete -o filenames -F _flud flud
"""


# ---- zsh -------------------------------------------------------------------------

def _zsh_quote(text: str) -> str:
    return (text or "").replace("\\", "\\\\").replace("'", "'\\''").replace("[", "\\[") \
        .replace("]", "\\]").replace(":", "\\:")


def zsh_script(parser) -> str:
    tree = command_tree(parser)
    functions = []
    for node in walk(tree):
        name = "_flud" + "".join(f"_{part.replace('-', '_')}" for part in node.path)
        specs = []
        for action in node.options:
            flags = action.option_strings
            what = _zsh_quote(" ".join((action.help or "").split())[:70])
            value = ""
            if takes_value(action):
                kind = value_kind(action)
                label = _zsh_quote(str(action.metavar or action.dest))
                action_text = {"choices": "(" + " ".join(map(str, action.choices or ())) + ")",
                               "dir": "_files -/", "file": "_files"}.get(kind, " ")
                value = f":{label}:{action_text}"
            repeat = "*" if isinstance(action, argparse._AppendAction) else ""
            if len(flags) > 1:   # '(-v --verbose)'{-v,--verbose}'[help]'
                specs.append(f"'{repeat}({' '.join(flags)})'{{{','.join(flags)}}}"
                             f"'[{what}]{value}'")
            else:
                specs.append(f"'{repeat}{flags[0]}[{what}]{value}'")
        if node.children:
            entries = " ".join(f"'{c.path[-1]}:{_zsh_quote(' '.join(c.help.split())[:60])}'"
                               for c in node.children)
            body = [f"    local -a commands=({entries})",
                    "    local curcontext=\"$curcontext\" state line",
                    "    _arguments -C \\",
                    *(f"        {spec} \\" for spec in specs),
                    "        '1: :->command' '*:: :->rest'",
                    "    case $state in",
                    "        command) _describe -t commands 'flud command' commands ;;",
                    "        rest)",
                    "            case $words[1] in",
                    *(f"                {c.path[-1]}) _flud"
                      + "".join(f"_{p.replace('-', '_')}" for p in c.path) + " ;;"
                      for c in node.children),
                    "            esac ;;",
                    "    esac"]
        else:
            body = ["    _arguments \\", *(f"        {spec} \\" for spec in specs),
                    "        '*:file:_files'"]
        functions.append(f"{name}() {{\n" + "\n".join(body) + "\n}\n")
    return "#compdef flud\n# zsh completion for flud (made by `flud completion zsh`)\n\n" + \
        "\n".join(functions) + '\n_flud "$@"\n'


# ---- the man page ----------------------------------------------------------------

def _roff(text: str) -> str:
    text = " ".join((text or "").split())
    text = text.replace("\\", "\\e").replace("-", "\\-")
    return ("\\&" + text) if text[:1] in (".", "'") else text


def _option_line(action) -> str:
    flags = ", ".join(f"\\fB{_roff(flag)}\\fR" for flag in action.option_strings)
    if takes_value(action):
        metavar = action.metavar or (("{" + ",".join(map(str, action.choices)) + "}")
                                     if action.choices else action.dest.upper())
        flags += f" \\fI{_roff(str(metavar))}\\fR"
    return flags


ENVIRONMENT = (
    ("FLUD_PASSPHRASE", "the key's passphrase (export, import, passwd)"),
    ("FLUD_PASSPHRASE_FILE", "a file whose first line is the passphrase"),
    ("FLUD_PASSPHRASE_COMMAND", "a command (no shell) whose first line of output is the "
                                "passphrase"),
    ("FLUD_NEW_PASSPHRASE", "the new passphrase of `flud key passwd`"),
    ("FLUD_KEYRING", "0: never read or write the OS keyring"),
)


def man_page(parser, date: str = None) -> str:
    tree = command_tree(parser)
    date = date or datetime.date.today().isoformat()
    out = [f'.TH FLUD 1 "{date}" "flud" "User Commands"',
           ".SH NAME", "flud \\- " + _roff(parser.description or "peer-to-peer backup"),
           ".SH SYNOPSIS", "\\fBflud\\fR \\fICOMMAND\\fR [\\fIOPTIONS\\fR]",
           ".SH DESCRIPTION",
           _roff("flud backs up a home directory onto other people's machines, encrypted "
                 "and erasure-coded, and restores it when some of them are gone. Durations "
                 "are written 7d, 2w, 36h, 30min, 90s or 1y2mo (a bare m is refused: min or "
                 "mo); sizes 64M, 10GiB (powers of 1024); rates 1MiB/s, 500K."),
           ".SH COMMANDS"]
    for node in walk(tree):
        if not node.path:
            continue
        usage = " ".join(node.parser.format_usage().split())
        usage = usage[len("usage: "):] if usage.startswith("usage: ") else usage
        out += [".SS " + _roff(" ".join(node.path)), _roff(node.help), ".PP",
                "\\fB" + _roff(usage) + "\\fR"]
        for action in node.positionals:
            if isinstance(action, argparse._SubParsersAction):
                continue
            out += [".TP", f"\\fI{_roff(str(action.metavar or action.dest))}\\fR",
                    _roff(action.help or "")]
        for action in node.options:
            out += [".TP", _option_line(action), _roff(action.help or "")]
    out += [".SH ENVIRONMENT"]
    for name, what in ENVIRONMENT:
        out += [".TP", f"\\fB{name}\\fR", _roff(what)]
    out += [".SH FILES", ".TP", "\\fIHOME/agent.toml\\fR",
            _roff("the agent's schedules, limits, [[bandwidth]] windows, [notify] and [hooks]"),
            ".SH EXIT STATUS",
            _roff("0 done; 1 done but something was left out (or nothing found); 2 could not "
                  "be done, the message says why; 130 interrupted."),
            ".SH SEE ALSO", _roff("README.md and docs/ in the flud source tree."), ""]
    return "\n".join(out)
