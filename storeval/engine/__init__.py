"""Engines run the clients of a cell: local processes (default) or MPI ranks."""
