"""The shell's sandbox: one `/bin/sh -c` command in bubblewrap, outside the event loop and within
limits (docs/tools.md, "The shell").

spec: what the sandbox is, from `tools.shell` and the home; bwrap: the bubblewrap command line (what
it shows and refuses); output: bounded capture of what a command prints; process: the child, its
deadline and a kill that leaves nothing; runner: `Sandbox.run` and `probe`; report: the result the
model reads and the request a person allows. Imports only config and the vocabulary.
"""
