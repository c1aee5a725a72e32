"""What lldb imports: `command script import /path/to/ualdbg/loaders/ualdbg_lldb.py` (`ualdbg
lldb` does it; `ualdbg lldbinit` prints the line for ~/.lldbinit). lldb imports this file as a
module named `ualdbg_lldb` with its folder on sys.path, then calls __lldb_init_module here."""
import os
import sys


def __lldb_init_module(debugger, internal_dict):
    # The folder holding the package (site-packages, or a clone): importable once on sys.path.
    # lldb also keeps this file's folder (ualdbg/loaders) on sys.path: harmless, its modules are
    # not named like anything ualdbg imports.
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sys.path.insert(0, root)
    from ualdbg.loaders import paths  # imports nothing else of ualdbg

    paths.add_paths(root)
    missing = paths.missing_dependencies()
    if missing:
        sys.stderr.write(paths.missing_message(root, missing))
        return
    import ualdbg

    ualdbg.__lldb_init_module(debugger, internal_dict)
