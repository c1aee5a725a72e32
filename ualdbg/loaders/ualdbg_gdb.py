"""What gdb sources: `ualdbg gdb` passes it with -x; `ualdbg gdbinit` prints the `source` line
for ~/.gdbinit. gdb runs a sourced file as __main__ with __file__ as typed (PLATFORM.md)."""
import importlib.util
import os

MIN_GDB = (12, 1)


def _load_paths():  # type: ignore[no-untyped-def]
    """This folder's paths.py, loaded by file: the package is not importable yet."""
    here = os.path.dirname(os.path.abspath(os.path.expanduser(__file__)))
    spec = importlib.util.spec_from_file_location("_ualdbg_loader_paths", os.path.join(here, "paths.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _main() -> None:
    import gdb  # the real module: gdb imported it before running this file

    version = tuple(int(x) for x in gdb.VERSION.split()[0].split(".")[:2] if x.isdigit())
    if version < MIN_GDB:
        gdb.write(f"ualdbg: gdb {gdb.VERSION} is too old; ualdbg needs gdb {'.'.join(map(str, MIN_GDB))} or newer\n", gdb.STDERR)
        return
    paths = _load_paths()
    root = paths.package_root(__file__)
    paths.add_paths(root)
    missing = paths.missing_dependencies()
    if missing:
        gdb.write(paths.missing_message(root, missing), gdb.STDERR)
        return
    from ualdbg.adapters.gdb import install

    install()


_main()
