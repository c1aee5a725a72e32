"""Install the shared command declarations as gdb commands (`ualdbg ...`, `catch unaligned`)
and the settings as `set/show ualdbg NAME`. Installing twice replaces, never duplicates."""
from __future__ import annotations

import os
import sys
import traceback
from typing import Any

import gdb  # type: ignore[import-not-found]

from ...commands.all import COMMANDS, GROUPS, CommandSpec, HelpShown, UsageError
from ...core.settings import SETTINGS
from ...engines.agentlink import AgentHost
from ...engines.session import Session
from ...engines.step import StepControl
from ...render.console import to_text
from .hooks import GdbHooks
from .target import GdbTarget

_STATE: dict[str, Any] = {}
# Commands that set or clear flags in every thread: in non-stop mode the running threads are
# held stopped while they run (holding.py: Holding.hold_running).
_HOLDING = {("break",), ("off",), ("trace", "start"), ("trace", "stop")}


def _color() -> bool:
    return sys.stdout.isatty() and "NO_COLOR" not in os.environ and os.environ.get("TERM") != "dumb"


def _emit(items: list[Any]) -> None:
    if items:
        gdb.write(to_text(items, color=_color()))


class _Host:
    """The Host a command runs against in gdb."""

    def __init__(self, hooks: GdbHooks) -> None:
        self.hooks = hooks
        self.session = hooks.session

    def target(self) -> GdbTarget | None:
        return self.hooks.target()

    def install(self) -> None:
        prog = gdb.current_progspace().filename
        if not prog and not gdb.selected_inferior().pid:
            raise UsageError("ualdbg: no program to arm: load one first (`file PROG`, or gdb --args PROG ...)")
        self.hooks.install()
        self.hooks.note_program()

    def uninstall(self) -> None:
        self.hooks.uninstall()

    def step_control(self) -> StepControl:
        return self.hooks.step_control

    def agent_host(self) -> AgentHost:
        return self.hooks.agent_host

    def settle_faults(self) -> frozenset[int]:
        return self.hooks.settle_faults()

    def launch_info(self) -> tuple[str, list[str], tuple[str, ...], str]:
        """For `ualdbg stackcheck`: the loaded program, `show args`, and the environment `run`
        would give it, less the LINES/COLUMNS gdb adds on its own (hooks.fix_environment)."""
        return launch_info()


def launch_info() -> tuple[str, list[str], tuple[str, ...], str]:
    import shlex

    prog = gdb.current_progspace().filename
    if not prog:
        raise UsageError("ualdbg: no program loaded: `file PROG` first (or name one after --)")
    text = gdb.execute("show args", to_string=True)
    args: list[str] = []
    start, end = text.find('"'), text.rfind('"')
    if 0 <= start < end:
        try:
            args = shlex.split(text[start + 1:end])
        except ValueError:
            args = text[start + 1:end].split()
    try:
        with open("/proc/self/environ", "rb") as f:
            own = {e.split(b"=", 1)[0].decode(errors="replace") for e in f.read().split(b"\0") if e}
    except OSError:
        own = set()
    env: list[str] = []
    removed: list[str] = []
    for line in gdb.execute("show environment", to_string=True).splitlines():
        name, eq, _ = line.partition("=")
        if not eq:
            continue
        if name in ("LINES", "COLUMNS") and name not in own:
            removed.append(name)
            continue
        env.append(line)
    note = "environment: what gdb's `run` would give (show environment)"
    if removed:
        note += f", less {' and '.join(removed)} that gdb adds itself"
    return prog, args, tuple(env), note


def _run(spec: CommandSpec, argv: str) -> None:
    host = _STATE["host"]
    try:
        host.hooks.restore_catchpoints()  # a `delete` since the last prompt (a batch run has none)
        if spec.path in _HOLDING:
            disarming = spec.path in (("off",), ("trace", "stop"))
            with host.hooks.holding.hold_running(host.hooks.touched_threads() if disarming else None):
                _emit(spec.invoke(host, argv))
            host.hooks.hint_all_stop()
        else:
            _emit(spec.invoke(host, argv))
    except HelpShown as shown:
        gdb.write(shown.text)
    except UsageError as exc:
        raise gdb.GdbError(str(exc)) from None
    except gdb.GdbError:
        raise
    except Exception as exc:
        if os.environ.get("UALDBG_DEBUG"):
            traceback.print_exc()
        raise gdb.GdbError(f"ualdbg {' '.join(spec.path)}: {exc}") from None


def _make_command(name: str, spec: CommandSpec) -> None:
    doc = spec.summary + "\n\n" + spec.help

    class _Cmd(gdb.Command):
        __doc__ = doc

        def __init__(self) -> None:
            super().__init__(name, gdb.COMMAND_USER)

        def invoke(self, argument: str, from_tty: bool) -> None:
            self.dont_repeat()
            _run(spec, argument)

        def complete(self, text: str, word: str | None) -> Any:
            """Options, and an option's choices after it (`ualdbg trace start --engine <TAB>`);
            a file name where the command takes one (`trace save`, `--json`)."""
            before = text.split()
            token = before.pop() if before and not text[-1:].isspace() else ""
            # gdb breaks words at '-' too: `word` is the end of `token`, and what it gets back
            # replaces `word` alone.
            cut = len(token) - len(word or "")
            found = [c[cut:] for c in spec.parser.complete(before, token)]
            if found or token.startswith("-"):
                return found
            return gdb.COMPLETE_FILENAME if spec.path == ("trace", "save") or before[-1:] == ["--json"] else found

    _Cmd()


def _make_prefix(name: str, doc: str) -> None:
    path = tuple(name.split()[1:])
    subs = sorted(" ".join(p[len(path):len(path) + 1]) for p in COMMANDS if p[:len(path)] == path and len(p) > len(path))

    class _Prefix(gdb.Command):
        __doc__ = doc + "\n\nSubcommands are listed below."

        def __init__(self) -> None:
            super().__init__(name, gdb.COMMAND_USER, prefix=True)

        def invoke(self, argument: str, from_tty: bool) -> None:
            """`ualdbg trace --help` (a prefix with an invoke takes unknown words: gdb's py-cmd.c)."""
            self.dont_repeat()
            words = argument.split()
            if not words or words[0] in ("--help", "-h", "help"):
                lines = [doc, "", "commands: " + ", ".join(f"{name} {w}" for w in dict.fromkeys(subs)),
                         f"each has --help (also `help {name} COMMAND`)"]
                gdb.write("\n".join(lines) + "\n")
                return
            raise gdb.GdbError(f"ualdbg: no command `{name} {words[0]}`; {name} --help lists them")

    _Prefix()


def _make_settings(session: Session) -> None:
    for verb in ("set", "show"):
        class _SetPrefix(gdb.Command):
            __doc__ = f"{verb.capitalize()} ualdbg settings."

            def __init__(self, v: str = verb) -> None:
                super().__init__(f"{v} ualdbg", gdb.COMMAND_DATA, prefix=True)

        _SetPrefix()
    for setting in SETTINGS.values():
        kind = gdb.PARAM_BOOLEAN if setting.kind is bool else (
            gdb.PARAM_ZUINTEGER if setting.kind is int else gdb.PARAM_ENUM if setting.choices else gdb.PARAM_STRING)

        class _Param(gdb.Parameter):
            __doc__ = setting.doc
            set_doc = f"Set {setting.name}: {setting.doc}"
            show_doc = f"Show {setting.name}."

            def __init__(self, s: Any = setting, k: int = kind) -> None:
                if s.choices:
                    super().__init__(f"ualdbg {s.name}", gdb.COMMAND_DATA, k, list(s.choices))
                else:
                    super().__init__(f"ualdbg {s.name}", gdb.COMMAND_DATA, k)
                self.s = s
                self.value = s.default

            def get_set_string(self) -> str:
                try:
                    session.config.set(self.s.name, str(self.value) if not isinstance(self.value, bool) else ("on" if self.value else "off"))
                except ValueError as exc:
                    self.value = session.config[self.s.name]
                    raise gdb.GdbError(str(exc)) from None
                if self.s.name == "buffer":
                    session.buffer.resize(session.config["buffer"])
                return ""

            def get_show_string(self, svalue: str) -> str:
                return f"ualdbg {self.s.name} is {svalue}"

        _Param()


def install() -> Session:
    """Install ualdbg into this gdb; a second call keeps the existing session."""
    if "session" in _STATE:
        return _STATE["session"]
    session = Session("gdb")
    hooks = GdbHooks(session)
    _STATE.update(session=session, hooks=hooks, host=_Host(hooks))
    _make_prefix("ualdbg", GROUPS[()])
    for path, doc in GROUPS.items():
        if path:
            _make_prefix("ualdbg " + " ".join(path), doc)
    for path, spec in COMMANDS.items():
        _make_command("ualdbg " + " ".join(path), spec)
    _make_command("catch unaligned", COMMANDS[("break",)])
    _make_settings(session)
    gdb.execute("set print thread-events off", to_string=True) if os.environ.get("UALDBG_QUIET_THREADS") else None
    return session


def installed() -> tuple[_Host, GdbHooks]:
    """The host and hooks of the installed session (for the batch driver)."""
    return _STATE["host"], _STATE["hooks"]


def before_detach() -> None:
    """Called by gdb's `hook-detach`: clear AC and TF in every thread of the process."""
    if "hooks" in _STATE:
        _STATE["hooks"].before_detach()
