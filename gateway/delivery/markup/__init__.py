"""Markdown → each platform's markup: a shared tree walk (base, tree), Telegram entities (telegram),
Slack mrkdwn / Discord Markdown / plain text (text), and the per-flavour entry point (render). Pure
functions.
"""
