"""Figures from records: per phase, per cell, and across repetitions."""
