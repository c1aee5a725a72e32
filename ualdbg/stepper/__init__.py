"""The native single-step tracer of `ualdbg trace --engine step` (C source in src/, built on
first use by build.py; driven by ualdbg.engines.stepnative)."""
