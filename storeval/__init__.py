"""storeval: evaluate storage systems for data-intensive science."""

__version__ = "0.1.0"
