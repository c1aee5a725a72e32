"""What lldb imports: `command script import /path/to/ualdbg/loaders/ualdbg_lldb.py` (`ualdbg
lldb` does it; `ualdbg lldbinit` prints the line for ~/.lldbinit). lldb imports this file as a
module named `ualdbg_lldb` with its folder on sys.path, then calls __lldb_init_module here."""
import importlib.util
import os
import sys


def _load_paths():  # type: ignore[no-untyped-def]
    """This folder's paths.py, loaded by file: the package is not importable yet."""
    here = os.path.dirname(os.path.abspath(os.path.expanduser(__file__)))
    spec = importlib.util.spec_from_file_location("_ualdbg_loader_paths", os.path.join(here, "paths.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def __lldb_init_module(debugger, internal_dict):
    paths = _load_paths()
    # lldb keeps this file's folder (ualdbg/loaders) on sys.path: harmless, its modules are not
    # named like anything ualdbg imports.
    root = paths.package_root(__file__)
    paths.add_paths(root)
    missing = paths.missing_dependencies()
    if missing:
        sys.stderr.write(paths.missing_message(root, missing))
        return
    import ualdbg

    ualdbg.__lldb_init_module(debugger, internal_dict)
