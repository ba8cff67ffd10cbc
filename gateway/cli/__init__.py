"""The `gateway` command (main): parses arguments, configures logging, maps errors to exit codes."""
