"""The `gateway` command. main builds the parser from one module per command group (init, run,
checks, prompt and agents, sessions, jobs, pairing, users, service, tools) and maps errors to exit
codes; context holds what every command shares (exit codes, home, config, logging). A new command
group is a new module with `register(sub)`, named in main.COMMANDS; at the top it imports only the
standard library and context, and the rest inside the command that runs. Imports ops/ and below;
only cli/ and ops/ import adapters.
"""
