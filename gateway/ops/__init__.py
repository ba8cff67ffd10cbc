"""Running it: the composition root (wiring), the daemon's start/serve/drain (daemon), the adapter supervisor (supervisor), /healthz /readyz /metrics
/status (status), who may use the web listener (web_guard), sd_notify (notify), the systemd unit (service) and `gateway doctor` (doctor).
The only package besides cli/ that imports adapters.
"""
