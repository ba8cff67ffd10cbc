"""Running it: the composition root (wiring), the daemon's start/serve/drain (daemon), the adapter
supervisor (supervisor), /healthz /readyz /metrics /status (status), who may use the web listener
(web_guard), the bounded HTTP listeners (http_limits), acting on access changes the CLI recorded
(access_watch), sd_notify (notify), the systemd unit (service), `gateway doctor` (doctor), the turns
that wait for a person wired in (waiting) and the home at start-up: one process per home, an
unusable home or database told in one line (home). The only package besides cli/ that imports
adapters.
"""
