"""What the daemon tells its operator: logs (one line per turn, secrets redacted, JSON or human; the
same warning repeated is held back: repeats) and the Prometheus metrics. Imports only the vocabulary
and config.
"""
