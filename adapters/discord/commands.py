"""Discord slash commands: registered on one CommandTree, synced once per process, acknowledged at
once, and the interactions they opened kept (15 minutes) so the replies go through them instead of
the channel."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

import aiohttp
import discord
from discord import app_commands

from adapters.discord.text import interaction_inbound
from gateway.config.settings import DiscordConfig
from gateway.events import Inbound, SubmitOutcome, SubmitResult

# one logger for the Discord adapter, whichever module speaks
log = logging.getLogger("adapters.discord.adapter")

INTERACTION_TTL_S = 15 * 60.0  # an interaction token answers follow-ups for 15 minutes
COMMANDS: tuple[tuple[str, str], ...] = (
    ("new", "Start a new conversation"),
    ("status", "Show the session, model and token usage"),
    ("usage", "Show token usage of this conversation"),
    ("stop", "Stop the answer in progress"),
    ("retry", "Answer your last message again"),
    ("undo", "Forget the last exchange"),
    ("help", "List the commands"),
)
ASK_DESCRIPTION = "Ask the agent something (instead of mentioning it)"
JOBS_DESCRIPTION = "Your scheduled reminders and jobs; give an id to cancel one"
# only the asker needs to see these
EPHEMERAL_COMMANDS = frozenset({"status", "usage", "help", "jobs"})
NOT_ANSWERED = {
    SubmitOutcome.IGNORED: "Sorry, I can't answer you here.",
    SubmitOutcome.DUPLICATE: "I already have this one.",
}
FAILED_TEXT = "Sorry, something went wrong on my side; please try again."
SHUTTING_DOWN_TEXT = "I'm restarting right now; please try again in a minute."


@dataclass(eq=False)
class PendingInteraction:
    interaction: discord.Interaction[Any]
    ephemeral: bool
    created: float
    answered: bool = False


class SlashCommands:
    """`submit` is the adapter's, so a command queues
    behind the gateway messages that came before it."""

    def __init__(
        self,
        config: DiscordConfig,
        submit: Callable[[Inbound], Awaitable[SubmitResult]],
        monotonic: Callable[[], float],
    ) -> None:
        self.config = config
        self.monotonic = monotonic
        self._submit = submit
        self._synced = False
        self._interactions: dict[str, PendingInteraction] = {}

    def tree(self, client: discord.Client) -> app_commands.CommandTree[discord.Client]:
        tree: app_commands.CommandTree[discord.Client] = app_commands.CommandTree(client)
        for name, description in COMMANDS:
            tree.add_command(
                app_commands.Command(
                    name=name, description=description, callback=self._command_callback(name)
                )
            )

        @app_commands.describe(prompt="What to ask")
        async def ask(interaction: discord.Interaction[Any], prompt: str) -> None:
            await self.on_command(interaction, "ask", prompt)

        tree.add_command(
            app_commands.Command(name="ask", description=ASK_DESCRIPTION, callback=ask)
        )

        @app_commands.describe(cancel="The id of one of your jobs, to cancel it")
        async def jobs(interaction: discord.Interaction[Any], cancel: int | None = None) -> None:
            await self.on_command(interaction, "jobs", "" if cancel is None else f"cancel {cancel}")

        tree.add_command(
            app_commands.Command(name="jobs", description=JOBS_DESCRIPTION, callback=jobs)
        )
        return tree

    def _command_callback(self, name: str) -> Callable[[discord.Interaction[Any]], Any]:
        async def callback(interaction: discord.Interaction[Any]) -> None:
            await self.on_command(interaction, name, "")

        return callback

    async def sync(
        self, client: discord.Client, tree: app_commands.CommandTree[discord.Client]
    ) -> None:
        """Once per process: a bulk overwrite with unchanged
        commands is harmless but still rate limited."""
        mode = self.config.command_sync
        if mode == "off" or self._synced:
            return
        try:
            if mode == "global":
                synced = await tree.sync()
                log.info("discord: synced %s slash commands globally", len(synced))
            else:
                guild_ids = self.config.allowed_guilds or tuple(str(g.id) for g in client.guilds)
                for guild_id in guild_ids:
                    guild = discord.Object(id=int(guild_id))
                    tree.copy_global_to(guild=guild)
                    synced = await tree.sync(guild=guild)
                    log.info("discord: synced %s slash commands to guild %s", len(synced), guild_id)
        except (discord.DiscordException, aiohttp.ClientError, OSError) as exc:
            log.warning(
                "discord: syncing slash commands failed (%s); invite the bot with the "
                "applications.commands scope, or set discord.command_sync: off",
                exc,
            )
            return
        self._synced = True

    async def on_command(
        self, interaction: discord.Interaction[Any], name: str, prompt: str
    ) -> None:
        """Acknowledge at once (Discord allows 3 s), then
        submit; `send` answers through the interaction."""
        ephemeral = name in EPHEMERAL_COMMANDS
        try:
            await interaction.response.defer(ephemeral=ephemeral, thinking=True)
        except discord.HTTPException as exc:
            log.warning("discord: could not acknowledge /%s (%s)", name, exc)
            return
        try:
            inbound = interaction_inbound(
                interaction, prompt if name == "ask" else f"/{name} {prompt}".strip()
            )
            self._remember_interaction(inbound.message_id, interaction, ephemeral)
            result = await self._submit(inbound)
            await self._settle_interaction(inbound.message_id, result)
        except Exception:
            log.exception("discord: /%s from user %s not handled", name, interaction.user.id)
            with suppress(discord.HTTPException):
                await interaction.edit_original_response(content=FAILED_TEXT)

    def _remember_interaction(
        self, key: str, interaction: discord.Interaction[Any], ephemeral: bool
    ) -> None:
        now = self.monotonic()
        for old in [
            k for k, p in self._interactions.items() if now - p.created >= INTERACTION_TTL_S
        ]:
            del self._interactions[old]
        self._interactions[key] = PendingInteraction(interaction, ephemeral, now)

    async def _settle_interaction(self, key: str, result: SubmitResult) -> None:
        """Nothing will be sent for an ignored or duplicate
        command: replace "thinking…" with one sentence."""
        text = NOT_ANSWERED.get(result.outcome)
        if result.outcome is SubmitOutcome.REFUSED and result.reason == "shutting down":
            text = SHUTTING_DOWN_TEXT
        pending = self._interactions.get(key)
        if text is None or pending is None or pending.answered:
            return
        del self._interactions[key]
        try:
            await pending.interaction.edit_original_response(content=text)
        except discord.HTTPException as exc:
            log.debug("discord: could not settle interaction %s: %s", key, exc)

    # ------------------------------------------------------------------ replies
    def interaction_for(self, our_id: str | None) -> PendingInteraction | None:
        pending = self._interactions.get(our_id or "")
        if pending is not None and self.monotonic() - pending.created >= INTERACTION_TTL_S:
            del self._interactions[our_id or ""]
            return None
        return pending

    async def answer(
        self, pending: PendingInteraction, text: str, mentions: discord.AllowedMentions
    ) -> str | None:
        """The first message replaces the "thinking…" placeholder; later ones are follow-ups."""
        interaction = pending.interaction
        sent: discord.Message
        try:
            if not pending.answered:
                sent = await interaction.edit_original_response(
                    content=text, allowed_mentions=mentions
                )
                pending.answered = True
            else:
                sent = await interaction.followup.send(
                    text, ephemeral=pending.ephemeral, allowed_mentions=mentions, wait=True
                )
        except discord.NotFound:
            # the token expired or the response was dismissed: post in the channel
            self._interactions = {k: p for k, p in self._interactions.items() if p is not pending}
            return None
        return str(sent.id)
