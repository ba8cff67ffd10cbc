"""Model clients: the neutral message types (types), the Anthropic and OpenAI wires (anthropic_wire,
openai_wire), their transports (http: the gateway's own aiohttp POST; sdk: the official SDKs,
imported only when chosen; transport: which one a wire uses), streamed answers folded back into
whole ones (streams) and the model choice with its fallback (factory). Imports only the vocabulary
and config.
"""
