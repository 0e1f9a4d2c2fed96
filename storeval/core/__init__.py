"""The model every layer shares, importing nothing above it.

``cell`` (a cell and its target), ``job`` (what every client of a cell receives), ``records`` (what one
client did in one phase), ``oplog`` (the hot loops' buffers and the recorder that turns them into records),
``comm`` (how clients synchronise), ``outcome`` (what an engine hands back, and the Engine protocol),
``stop`` (the process-wide stop request), ``process`` (host name, process naming, liveness).
"""
