"""What the daemon tells its operator: logs (one line per turn, secrets redacted, JSON or human) and the
Prometheus metrics. Imports only the vocabulary and config.
"""
