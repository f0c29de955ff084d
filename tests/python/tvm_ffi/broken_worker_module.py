"""A worker module whose import fails, as one with a missing dependency's bad version does."""

raise ValueError("this worker module cannot be imported: its configuration is missing")
