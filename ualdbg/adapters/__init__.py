"""Debugger adapters: the only code that imports gdb or lldb."""
