"""The files a debugger loads to install ualdbg: gdb `source`s ualdbg_gdb.py, lldb `command
script import`s ualdbg_lldb.py. They ship inside the package, so `ualdbg gdb|lldb` and the
lines `ualdbg gdbinit|lldbinit` print work from a pip install as from a clone (paths.py)."""
