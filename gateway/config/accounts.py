"""Several bot accounts per platform: an account under `<platform>.accounts.<name>` takes every key
of its platform's section it does not set itself (`api_server`, `allowed_users`, `mode`, ...), but
never a token: each account is its own bot.

Done on the YAML nodes before loading, so each account loads as a whole platform config and a
problem keeps its line: the account's own keys at theirs, an inherited key at the section's.
"""

from __future__ import annotations

import copy

import yaml

PLATFORM_TOKENS = {
    "telegram": ("token",),
    "discord": ("token",),
    "slack": ("bot_token", "app_token", "signing_secret"),
}
ACCOUNTS_KEY = "accounts"


def inherit_accounts(root: yaml.Node | None) -> None:
    """Fill each account mapping with the keys of its section it lacks (copies: one node may appear
    once in the tree, or the loader takes it for a YAML alias)."""
    for platform, tokens in PLATFORM_TOKENS.items():
        section = _value(root, platform)
        accounts = _value(section, ACCOUNTS_KEY)
        if not isinstance(section, yaml.MappingNode) or not isinstance(accounts, yaml.MappingNode):
            continue
        shared = [(k, v) for k, v in section.value if _name(k) not in (ACCOUNTS_KEY, *tokens)]
        for _, account in accounts.value:
            if isinstance(account, yaml.MappingNode):
                own = {_name(k) for k, _ in account.value}
                inherited = [copy.deepcopy(pair) for pair in shared if _name(pair[0]) not in own]
                account.value = [*inherited, *account.value]


def _value(node: yaml.Node | None, key: str) -> yaml.Node | None:
    if not isinstance(node, yaml.MappingNode):
        return None
    return next((v for k, v in node.value if _name(k) == key), None)


def _name(node: yaml.Node) -> str | None:
    return node.value if isinstance(node, yaml.ScalarNode) else None
