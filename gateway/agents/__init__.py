"""Agents: each a namespace of its own (docs/agents.md). runtime holds one agent's parts (its
settings, model, memory, skills, tools and prompt inputs) and the roster of every agent, which also
routes a message to its agent by the bindings; build makes an agent's parts over what all agents
share. Imports config, knowledge, llm, agent and prompt; sessions, scheduling and ops take an
agent's parts from here.
"""
