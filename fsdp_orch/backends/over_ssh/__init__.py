"""Hosts reached over SSH, shared by the kinds that start attempts on them (ssh, tpu-vm).
Kept import-free: node_report runs from here on hosts with only Python."""
