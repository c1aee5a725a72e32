"""What gdb sources: `ualdbg gdb` passes it with -x; `ualdbg gdbinit` prints the `source` line
for ~/.gdbinit. gdb runs a sourced file as __main__ with __file__ as typed (PLATFORM.md). It finds
the package and checks its dependencies; everything that speaks to gdb is in ualdbg.adapters.gdb
(as the lldb loader leaves lldb to ualdbg.adapters.lldb)."""
import os
import sys


def _main() -> None:
    # The folder holding the package (site-packages, or a clone): importable once on sys.path.
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(os.path.expanduser(__file__)))))
    sys.path.insert(0, root)
    from ualdbg.loaders import paths  # imports nothing else of ualdbg

    paths.add_paths(root)
    missing = paths.missing_dependencies()
    if missing:
        sys.stderr.write(paths.missing_message(root, missing))  # gdb's own stderr inside gdb
        return
    from ualdbg.adapters.gdb import load

    load()


_main()
