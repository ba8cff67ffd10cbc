"""What the daemon tells its operator: logs (one line per turn, secrets redacted, JSON or human; the
same warning repeated is held back: repeats), the Prometheus metrics, and `gateway status`'s reading
and rendering of the daemon's /status (status_client, standard library only). Imports only the
vocabulary and config.
"""
