"""Discord buttons (the `Interactive` ability): choices as message components, a click as a tap (an
`Inbound` with `picked`), and a decided request's buttons replaced by its outcome.

"Interactions must be responded to within 3 seconds" (Discord, Receiving and Responding): a click is
acknowledged at once with DEFERRED_UPDATE_MESSAGE (type 6: nothing changes for the user yet), then
handed to the core; a refusal goes to the clicker alone as an ephemeral follow-up (flag 64). A
button's custom_id holds at most 100 characters and its label 80; the core's `choice_data` is 64
bytes at most.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import aiohttp
import discord

from adapters.discord.text import interaction_inbound, translate_error
from gateway.events import Choices, Submit
from gateway.events.choices import choice_data, parse_choice

log = logging.getLogger("adapters.discord.adapter")

STYLES = {"primary": discord.ButtonStyle.success, "danger": discord.ButtonStyle.danger}
MAX_LABEL = 80
FAILED_TEXT = "Sorry, that did not work on my side; please try again."


def view_of(choices: Choices) -> discord.ui.View:
    """The buttons as a view that is only rendered: finished before it is sent, so discord.py keeps
    no state for it (a click comes to `on_interaction`, and the core decides what it means, after a
    restart too)."""
    view = discord.ui.View(timeout=None)
    for choice in choices.options:
        style = STYLES.get(choice.style, discord.ButtonStyle.secondary)
        view.add_item(
            discord.ui.Button(
                label=choice.label[:MAX_LABEL],
                style=style,
                custom_id=choice_data(choices.token, choice.value),
            )
        )
    view.stop()
    return view


async def on_click(interaction: discord.Interaction[Any], submit: Submit | None) -> None:
    """Acknowledge at once, then let the core decide; a refusal (or a failure) reaches the clicker
    alone."""
    data: dict[str, Any] = dict(interaction.data or {})
    picked = parse_choice(str(data.get("custom_id") or ""))
    if picked is None or submit is None:
        return  # not one of ours: another app's component, or not started
    try:
        await interaction.response.defer()  # a component's defer is type 6, DEFERRED_UPDATE_MESSAGE
    except (discord.HTTPException, aiohttp.ClientError) as exc:
        log.warning("discord: could not acknowledge a click (%s)", exc)
        return
    inbound = dataclasses.replace(
        interaction_inbound(interaction, ""), message_id=f"ix{interaction.id}", picked=picked
    )
    try:
        result = await submit(inbound)
        notice = result.notice
    except Exception:  # a task root for one click: the clicker hears it failed
        log.exception("discord: a click in channel %s not handled", inbound.chat.chat_id)
        notice = FAILED_TEXT
    if notice:
        try:
            await interaction.followup.send(notice, ephemeral=True)
        except (discord.HTTPException, aiohttp.ClientError) as exc:
            log.info("discord: the answer to a click was not sent (%s)", exc)


async def close(client: discord.Client, channel_id: int, message_id: str, text: str) -> None:
    """The bot's own message becomes `text`, without its buttons."""
    try:
        await (
            client.get_partial_messageable(channel_id)
            .get_partial_message(int(message_id))
            .edit(content=text, view=None)
        )
    except (TimeoutError, discord.DiscordException, aiohttp.ClientError, OSError) as exc:
        raise translate_error(exc) from None
