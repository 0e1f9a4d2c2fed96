"""Probes of the machine storeval runs on: caches, counters."""
