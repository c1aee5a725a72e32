"""The lldb adapter: a Target over lldb's SB API, the hooks that feed the trap engine (a stop hook,
a single-step thread plan, breakpoints that never stop), and the `ualdbg` command container
generated from the shared declarations. Importing this package imports nothing else, so that
`entry` can check the dependencies before anything needs them."""
