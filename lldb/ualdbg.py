"""What an lldb user imports from a clone: `command script import /path/to/lldb/ualdbg.py` (from
any folder, as often as they like; `ualdbg lldb` and the line `ualdbg lldbinit` prints use
ualdbg/loaders/ualdbg_lldb.py instead). lldb imports this file as a module named `ualdbg`,
shadowing the package (PLATFORM.md): it puts the clone and its venv on sys.path (the loaders'
paths.py), takes itself out of sys.modules and imports the real package in its place, so lldb's
`import ualdbg` gets the package, whose `__lldb_init_module` installs the commands."""
import importlib.util
import os
import sys

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(os.path.expanduser(__file__))))


def _replace_self() -> None:
    # paths.py by file: `import ualdbg...` would find this very module, which lldb named ualdbg.
    spec = importlib.util.spec_from_file_location("_ualdbg_loader_paths", os.path.join(_ROOT, "ualdbg", "loaders", "paths.py"))
    paths = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(paths)  # type: ignore[union-attr]
    paths.add_paths(_ROOT)  # ahead of this file's folder, which lldb put on sys.path
    me = sys.modules.pop(__name__, None)
    try:
        import ualdbg  # noqa: F401  (the package, now that this module is out of the way)
    except Exception as exc:
        if me is not None:
            sys.modules[__name__] = me
        sys.stderr.write(f"ualdbg: cannot import the ualdbg package: {exc}\n")


def __lldb_init_module(debugger, internal_dict):
    """Called on this module only when lldb holds it rather than the package: the package
    could not be imported, or lldb re-imported this file over a module it had (reload)."""
    package = sys.modules.get(__name__)
    if package is not None and package.__dict__ is not globals():
        package.__lldb_init_module(debugger, internal_dict)


if __name__ == "ualdbg":
    _replace_self()
