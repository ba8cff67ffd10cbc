"""agent-gateway: one LLM agent on Telegram, Discord, Slack and a local web chat.

The packages read top-down as the path of one message; each may import only the ones listed before
it (the ones on one line are peers, and so are the five of knowledge/, media/, mcp/, net/ and
voice/); docs/architecture.md has the map, tests/test_typing_and_layers.py enforces it:

    events, errors         the vocabulary: normalized messages, the error tree
                           (confusables: the look-alike letters the scan folds)
    scan, config/          the untrusted-text scan; config.yaml → frozen dataclasses, and the YAML
                           loader that locates errors
    telemetry/ worker/ sandbox/
                           logs (redacted, JSON or human) and Prometheus metrics; the child process
                           that parses untrusted pages and files under CPU, memory and time limits;
                           the shell's bubblewrap sandbox
    llm/                   model clients: the two wires, their transports, the model choice
    store/                 SQLite: schema and migrations, rows, the search index, transcripts
    knowledge/ media/      what the agent knows: memory files, people, skills library, session
                           search; attachments made ready for the model (pictures, documents, voice)
    mcp/  net/  voice/     MCP servers and their tools; the web tools' reach (address guard, fetch,
                           search); voice replies: what is spoken, text-to-speech, OGG/Opus
    agent/                 the model ⇄ tools loop and every tool
    prompt/                the three-tier system prompt, platform hints, the stored session prompt
    delivery/  agents/     outbox, rate limits, chunking and markup per platform; each agent's parts
                           (model, memory, tools, prompt inputs) and the bindings that route to it
    approvals/             a turn that waits for a person: approvals of tool calls, `ask`
                           questions, buttons
    sessions/  access/     the session manager and its lifecycle; the gate and pairing
    scheduling/            scheduled jobs: reminders and recurring runs set up from a chat
    webui/                 the dashboard and the web chat's stored history, for the owner's browser
    ops/                   the composition root (wiring), the daemon, health and status, service
                           install, doctor
    cli/                   the `gateway` command
"""
