"""Ways to show results: terminal tables, JSON documents, progress bars."""
