"""What gdb sources: `ualdbg gdb` passes it with -x; `ualdbg gdbinit` prints the `source` line
for ~/.gdbinit. gdb runs a sourced file as __main__ with __file__ as typed (PLATFORM.md)."""
import os
import sys

MIN_GDB = (12, 1)


def _main() -> None:
    import gdb  # the real module: gdb imported it before running this file

    version = tuple(int(x) for x in gdb.VERSION.split()[0].split(".")[:2] if x.isdigit())
    if version < MIN_GDB:
        gdb.write(f"ualdbg: gdb {gdb.VERSION} is too old; ualdbg needs gdb {'.'.join(map(str, MIN_GDB))} or newer\n", gdb.STDERR)
        return
    # The folder holding the package (site-packages, or a clone): importable once on sys.path.
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(os.path.expanduser(__file__)))))
    sys.path.insert(0, root)
    from ualdbg.loaders import paths  # imports nothing else of ualdbg

    paths.add_paths(root)
    missing = paths.missing_dependencies()
    if missing:
        gdb.write(paths.missing_message(root, missing), gdb.STDERR)
        return
    from ualdbg.adapters.gdb import install

    install()


_main()
