"""Alerts with a lifecycle (firing, resolved) and the log of every automatic decision."""
