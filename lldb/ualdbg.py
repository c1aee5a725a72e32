"""What an lldb user imports: `command script import /path/to/lldb/ualdbg.py` (from any folder,
as often as they like). lldb imports this file as a module named `ualdbg`, shadowing the package
(PLATFORM.md): it puts the repository and its virtualenv on sys.path, takes itself out of
sys.modules and imports the real package in its place, so lldb's `import ualdbg` gets the package,
whose `__lldb_init_module` installs the commands."""
import glob
import os
import sys


def _paths() -> str:
    root = os.path.dirname(os.path.dirname(os.path.abspath(os.path.expanduser(__file__))))
    venv = os.environ.get("UALDBG_VENV") or os.path.join(root, ".venv")
    pyver = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    # lldb's Python is the system /usr/bin/python3; the venv was made from it (PLATFORM.md).
    for site in glob.glob(os.path.join(venv, "lib", pyver, "site-packages")):
        if site not in sys.path:
            sys.path.insert(0, site)
    if root in sys.path:
        sys.path.remove(root)
    sys.path.insert(0, root)  # ahead of this file's folder, which lldb put on sys.path
    return root


def _replace_self() -> None:
    _paths()
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
