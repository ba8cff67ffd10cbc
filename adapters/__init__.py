"""Platform adapters: a platform's events → `Inbound`,
an `OutboundMessage` → the platform's API calls.

One package per platform (telegram/, discord/, slack/) and a module each for the web chat (webchat,
its page in static/) and the terminal (console). Adapters import only the core's vocabulary
(gateway.events, gateway.errors, gateway.config) and modules of their own platform, never another
platform's; only gateway.ops.wiring and gateway.cli import adapters.
"""
