"""`ualdbg watch`, MONITOR ALIGN's heir: samples of a running trace (exact per-PC counts so far)
turned into rates per interval and per site, with the peak of each; rendered as a rich table
refreshed in place on a terminal, or as one line (or one JSON object) per interval otherwise."""
from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import field
from typing import Any

from ..core.model import SourceLoc
from ..lazyclass import dataclass


@dataclass(frozen=True)
class Sample:
    """The trace so far: faults in scope per PC (exact counters), traps out of scope, and the
    processes it covers (pids whose threads are counted)."""

    secs: float
    sites: dict[int, int]
    ignored: int
    pids: tuple[int, ...]
    # of each PC's count, the accesses that spanned two 64-byte lines, and two pages (issue 33;
    # the agent counts them): (line splits, page splits)
    splits: dict[int, tuple[int, int]] = field(default_factory=dict)


def thread_count(pids: tuple[int, ...]) -> int:
    n = 0
    for pid in pids:
        try:
            n += len(os.listdir(f"/proc/{pid}/task"))
        except OSError:
            pass
    return n


@dataclass
class SiteRate:
    pc: int
    count: int = 0
    rate: float = 0.0
    peak: float = 0.0
    line_splits: int = 0  # of count: across two 64-byte lines (page splits among them)
    page_splits: int = 0


@dataclass
class Rates:
    """Rates between successive samples: the whole trace's and each site's, with peaks."""

    secs: float = 0.0
    total: int = 0
    rate: float = 0.0
    peak: float = 0.0
    ignored: int = 0
    threads: int = 0
    sites: dict[int, SiteRate] = field(default_factory=dict)
    _last: Sample | None = None

    def add(self, s: Sample) -> None:
        dt = s.secs - self._last.secs if self._last is not None else s.secs
        before = self._last.sites if self._last is not None else {}
        total = sum(s.sites.values())
        self.rate = (total - self.total) / dt if dt > 0 else 0.0
        self.peak = max(self.peak, self.rate)
        for pc, count in s.sites.items():
            site = self.sites.setdefault(pc, SiteRate(pc))
            site.rate = (count - before.get(pc, 0)) / dt if dt > 0 else 0.0
            site.peak = max(site.peak, site.rate)
            site.count = count
            site.line_splits, site.page_splits = s.splits.get(pc, (0, 0))
        for pc, site in self.sites.items():
            if pc not in s.sites:
                site.rate = 0.0
        self.secs, self.total, self.ignored = s.secs, total, s.ignored
        self.threads = thread_count(s.pids)
        self._last = s

    def top(self, n: int) -> list[SiteRate]:
        return sorted(self.sites.values(), key=lambda r: (-r.rate, -r.count, r.pc))[:n]


def _where(loc: SourceLoc) -> tuple[str, str]:
    fn = loc.function or (f"{loc.module_name}+{loc.offset:#x}" if loc.module_name and loc.offset is not None else "?")
    line = f"{os.path.basename(loc.file)}:{loc.line}" if loc.file and loc.line else ""
    from ..render.console import shown

    return shown(fn), shown(line)


def as_json(r: Rates, resolve: Callable[[int], SourceLoc], n: int) -> str:
    sites = []
    for s in r.top(n):
        loc = resolve(s.pc)
        sites.append({"pc": f"{s.pc:#x}", "function": loc.function, "file": loc.file, "line": loc.line,
                      "count": s.count, "rate": round(s.rate, 1), "peak": round(s.peak, 1),
                      "line_splits": s.line_splits, "page_splits": s.page_splits})
    return json.dumps({"time": round(r.secs, 3), "faults_total": r.total, "rate": round(r.rate, 1),
                       "peak": round(r.peak, 1), "faults_ignored": r.ignored, "threads": r.threads, "sites": sites})


def as_line(r: Rates, resolve: Callable[[int], SourceLoc]) -> str:
    top = r.top(1)
    hot = ""
    if top and top[0].count:
        fn, line = _where(resolve(top[0].pc))
        hot = f"; top {fn}{' ' + line if line else ''} {top[0].rate:,.0f}/s"
    return (f"ualdbg watch: {r.secs:7.1f} s  {r.rate:10,.0f} faults/s  {r.total:,} total  "
            f"{r.threads} thread{'s' if r.threads != 1 else ''}{hot}")


PID_KEYS = "q or Ctrl-C: detach (the process goes on) and print the summary"
PROGRAM_KEYS = "q: stop watching (the program runs on; the summary follows at its end)   Ctrl-C: interrupt the program"


def as_table(r: Rates, resolve: Callable[[int], SourceLoc], n: int, title: str, keys: str = PID_KEYS) -> Any:
    from rich.table import Table

    t = Table(title=f"{title}  {r.secs:.0f} s, {r.threads} thread{'s' if r.threads != 1 else ''}, "
                    f"{r.rate:,.0f} faults/s (peak {r.peak:,.0f}), {r.total:,} total, {r.ignored:,} ignored",
              title_justify="left", caption=keys, caption_justify="left")
    for name, justify in (("now/s", "right"), ("peak/s", "right"), ("count", "right"), ("splits", "right"),
                          ("function", "left"), ("source", "left"), ("PC", "left")):
        t.add_column(name, justify=justify)  # type: ignore[arg-type]
    for s in r.top(n):
        fn, line = _where(resolve(s.pc))
        splits = f"{s.line_splits:,}" + (f" ({s.page_splits:,} page)" if s.page_splits else "")
        t.add_row(f"{s.rate:,.0f}", f"{s.peak:,.0f}", f"{s.count:,}", splits, fn, line, f"{s.pc:#x}")
    return t


class Keys:
    """`q` typed at the terminal (cbreak mode while watching; restored after)."""

    def __init__(self, on_quit: Callable[[], None]) -> None:
        self.on_quit = on_quit
        self._saved: Any = None
        self._fd: int | None = None

    def __enter__(self) -> Keys:
        import sys
        import termios
        import threading
        import tty

        if not sys.stdin.isatty():
            return self
        self._fd = sys.stdin.fileno()
        self._saved = termios.tcgetattr(self._fd)
        tty.setcbreak(self._fd)

        def read() -> None:
            while self._fd is not None:
                try:
                    ch = os.read(self._fd, 1)
                except OSError:
                    return
                if ch in (b"q", b"Q") or not ch:
                    self._restore()  # the terminal as it was, at once: a program that runs on may read it
                    self.on_quit()
                    return

        threading.Thread(target=read, daemon=True).start()
        return self

    def _restore(self) -> None:
        import termios

        if self._fd is not None and self._saved is not None:
            fd, self._fd = self._fd, None
            termios.tcsetattr(fd, termios.TCSADRAIN, self._saved)

    def __exit__(self, *exc: object) -> None:
        self._restore()


class Display:
    """Where each interval's sample goes: a rich Live table on a terminal, else a line (or a JSON
    object with --json-lines) per interval on `stream`."""

    def __init__(self, stream: Any, resolve: Callable[[int], SourceLoc], *, top: int, json_lines: bool,
                 live: bool, title: str, keys: str = PID_KEYS) -> None:
        self.stream, self.resolve, self.top, self.json_lines, self.title = stream, resolve, top, json_lines, title
        self.keys = keys
        self.rates = Rates()
        self._live: Any = None
        self._lock = threading.Lock()  # the sampler's thread and the program's output reader both draw
        self._partial = ""  # the program's output since its last newline
        self.closed = False
        if live and not json_lines:
            from rich.live import Live

            from ..render.console import make_console

            self._live = Live(as_table(self.rates, resolve, top, title, keys), console=make_console(stream, terminal=True),
                              auto_refresh=False, transient=False, redirect_stdout=False, redirect_stderr=False)
            self._live.start()
        self.started = time.monotonic()

    def sample(self, s: Sample) -> None:
        with self._lock:
            if self.closed:
                return
            self.rates.add(s)
            if self._live is not None:
                self._flush_partial()
                self._live.update(as_table(self.rates, self.resolve, self.top, self.title, self.keys), refresh=True)
            elif self.json_lines:
                print(as_json(self.rates, self.resolve, self.top), file=self.stream, flush=True)
            else:
                print(as_line(self.rates, self.resolve), file=self.stream, flush=True)

    def program_output(self, data: bytes) -> None:
        """The program's own output (its pty, ProgramOutput): printed above the live view, a line
        at a time (a line ended by `\r` alone, a progress line, shows its last state); once the
        view is closed, written as it came."""
        with self._lock:
            if self._live is None:
                out = getattr(self.stream, "buffer", None)
                if out is not None:
                    out.write(data.replace(b"\r\n", b"\n"))  # (the pty's ONLCR added each \r; the terminal adds its own)
                    out.flush()
                return
            from rich.text import Text

            from ..render.console import shown

            text = self._partial + data.decode(errors="replace").replace("\r\n", "\n")
            *lines, self._partial = text.split("\n")
            for line in lines:
                self._live.console.print(Text(shown(line.rsplit("\r", 1)[-1])), soft_wrap=True)

    def _flush_partial(self) -> None:
        """A line the program has not ended yet (a prompt, progress): shown at each refresh."""
        if self._partial and self._live is not None:
            from rich.text import Text

            from ..render.console import shown

            line, self._partial = self._partial.rstrip("\r").rsplit("\r", 1)[-1], ""
            if line:
                self._live.console.print(Text(shown(line)), soft_wrap=True)

    def close(self) -> None:
        with self._lock:
            self.closed = True
            if self._live is not None:
                self._flush_partial()
                self._live.stop()
                self._live = None


class ProgramOutput:
    """A pty for the program's stdout and stderr while `watch -- PROG` draws its live view: the
    program still writes to a terminal (same isatty, same window size), and its output reaches
    the real one through Display.program_output, around the view rather than over it."""

    def __init__(self, sink: Callable[[bytes], None]) -> None:
        import fcntl
        import termios

        self.sink = sink
        self.master, self.slave = os.openpty()
        try:
            size = fcntl.ioctl(1, termios.TIOCGWINSZ, b"\0" * 8)
            fcntl.ioctl(self.slave, termios.TIOCSWINSZ, size)
        except OSError:
            pass
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._copy, daemon=True)
        self._thread.start()

    def _copy(self) -> None:
        import select

        while True:
            ready = select.select([self.master], [], [], 0.1)[0]
            if not ready:
                if self._done.is_set():
                    return
                continue
            try:
                data = os.read(self.master, 65536)
            except OSError:  # EIO: every writer is gone
                return
            if not data:
                return
            self.sink(data)

    def close(self) -> None:
        """After the program ended: what it wrote last is copied, then the pty closed."""
        os.close(self.slave)
        self._done.set()
        self._thread.join(timeout=5)
        os.close(self.master)


class AgentSampler:
    """Samples of an agent run (`watch -- PROG`): the exact per-PC counters of every buffer in the
    run's directory, in scope only, summed over the processes."""

    def __init__(self, later_maps: dict[int, list[str]] | None = None) -> None:
        from ..agent import buffer as ab

        self.buffers = ab.OpenBuffers()
        self.root: int | None = None
        # each running process's /proc/PID/maps at every sample (when it changed): the final
        # document names data mapped after the agent's last snapshot from them (issue 31)
        self.later_maps = later_maps if later_maps is not None else {}

    def __call__(self, directory: str, secs: float) -> Sample:
        from ..agent import buffer as ab

        sites: dict[int, int] = {}
        splits: dict[int, tuple[int, int]] = {}
        ignored = 0
        pids = []
        for buf in self.buffers.each(directory):
            h = buf.header()
            if self.root is None and h.ppid == os.getpid():
                self.root = h.pid
            if h.state == ab.RUNNING:
                pids.append(h.pid)
                self._save_maps(h.pid)
            ignored += h.ignored
            for site in buf.sites():
                if site.in_scope:
                    sites[site.pc] = sites.get(site.pc, 0) + site.count
                    line, page = splits.get(site.pc, (0, 0))
                    splits[site.pc] = (line + (site.line_splits or 0), page + site.page_splits)
        return Sample(secs, sites, ignored, tuple(sorted(set(pids))), splits)

    def _save_maps(self, pid: int) -> None:
        try:
            with open(f"/proc/{pid}/maps") as f:
                text = f.read()
        except OSError:
            return
        texts = self.later_maps.setdefault(pid, [])
        if not texts or texts[-1] != text:
            texts.append(text)
            del texts[:-MAPS_KEPT]

    def close(self) -> None:
        self.buffers.close()


MAPS_KEPT = 16  # maps texts kept per process: the newest, for data mapped late in a long run


class LiveResolver:
    """PC -> function and line in a running process (its /proc/PID/maps), cached per PC."""

    def __init__(self, pid: Callable[[], int | None]) -> None:
        self.pid = pid
        self._sym: Any = None
        self._cache: dict[int, SourceLoc] = {}

    def __call__(self, pc: int) -> SourceLoc:
        loc = self._cache.get(pc)
        if loc is not None:
            return loc
        if self._sym is None:
            pid = self.pid()
            if pid is None:
                return SourceLoc(pc=pc)
            try:
                from ..symbols import ModuleMap, Symbolizer

                self._sym = Symbolizer(ModuleMap.for_pid(pid))
            except OSError:
                return SourceLoc(pc=pc)
        try:
            loc = self._sym.resolve(pc)
        except Exception:  # a process gone between two reads of its maps
            loc = SourceLoc(pc=pc)
        self._cache[pc] = loc
        return loc
