"""What a gdb user sources: `gdb -x gdb/ualdbg.py` or `(gdb) source /path/to/gdb/ualdbg.py`.
Finds the repository and its virtualenv, checks gdb and the dependencies, installs ualdbg."""
import glob
import os
import sys

MIN_GDB = (12, 1)


def _main() -> None:
    import gdb  # the real module: gdb imported it before running this file

    root = os.path.dirname(os.path.dirname(os.path.abspath(os.path.expanduser(__file__))))
    version = tuple(int(x) for x in gdb.VERSION.split()[0].split(".")[:2] if x.isdigit())
    if version < MIN_GDB:
        gdb.write(f"ualdbg: gdb {gdb.VERSION} is too old; ualdbg needs gdb {'.'.join(map(str, MIN_GDB))} or newer\n", gdb.STDERR)
        return
    # gdb does not put this file's folder on sys.path (PLATFORM.md); the venv was made from the
    # same /usr/bin/python3 gdb embeds, so its site-packages are importable here.
    venv = os.environ.get("UALDBG_VENV") or os.path.join(root, ".venv")
    pyver = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    for site in glob.glob(os.path.join(venv, "lib", pyver, "site-packages")):
        if site not in sys.path:
            sys.path.insert(0, site)
    if root not in sys.path:
        sys.path.insert(0, root)
    missing = []
    for module, package in (("capstone", "capstone"), ("elftools", "pyelftools"), ("rich", "rich")):
        try:
            __import__(module)
        except ImportError:
            missing.append(package)
    if missing:
        gdb.write(f"ualdbg: gdb's Python ({sys.executable or 'python'} {sys.version.split()[0]}) cannot import "
                  f"{', '.join(missing)}; run `make -C {root} setup` to create {venv}\n", gdb.STDERR)
        return
    from ualdbg.adapters.gdb import install

    install()


_main()
