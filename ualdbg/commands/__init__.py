"""Every ualdbg debugger command, declared once with argparse; both adapters install these."""
