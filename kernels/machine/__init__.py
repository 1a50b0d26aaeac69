"""Kernels that measure the machine's ceilings (chapter "The machine and the method")."""
