"""What a gdb user sources from a clone: `gdb -x gdb/ualdbg.py` or `(gdb) source gdb/ualdbg.py`.
It runs the loader that ships inside the package (ualdbg/loaders/ualdbg_gdb.py), which
`ualdbg gdb` and the line `ualdbg gdbinit` prints source directly."""
import os
import runpy

# run_path, not gdb's `source`: a file gdb sources runs in __main__'s namespace, whose __file__
# would still name this file.
runpy.run_path(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(os.path.expanduser(__file__)))),
                            "ualdbg", "loaders", "ualdbg_gdb.py"))
