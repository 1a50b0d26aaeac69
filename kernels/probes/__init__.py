"""Hardware probes: the MI25 microbenchmarks (source 003) ported to NVIDIA (chapter "Hardware probes")."""
