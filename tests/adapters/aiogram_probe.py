"""Run as a script in a fresh interpreter: import aiogram one way (`deferred`, `eager` or
`fallback`), parse real Updates, build the requests the adapter sends, and print what came out as
JSON, for tests to compare.

`fallback` gives pydantic a `ConfigWrapper.for_model` of another signature first, as a future
pydantic might.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

BOT_TOKEN = "42:TEST-token-for-serializing-only"

UPDATES: list[dict[str, Any]] = [
    {
        "update_id": 1,
        "message": {
            "message_id": 10,
            "date": 1700000000,
            "message_thread_id": 7,
            "is_topic_message": True,
            "chat": {"id": -100500, "type": "supergroup", "title": "Forum", "is_forum": True},
            "from": {
                "id": 1001,
                "is_bot": False,
                "first_name": "Alice",
                "username": "alice",
                "language_code": "en",
            },
            "text": "/ask@gw_bot what is 𝔸? see https://x.org and @bob",
            "entities": [
                {"type": "bot_command", "offset": 0, "length": 11},
                {"type": "url", "offset": 31, "length": 13},
                {"type": "mention", "offset": 49, "length": 4},
                {"type": "text_link", "offset": 12, "length": 4, "url": "https://example.org/a"},
                {
                    "type": "text_mention",
                    "offset": 17,
                    "length": 2,
                    "user": {"id": 1002, "is_bot": False, "first_name": "Bob"},
                },
            ],
            "reply_to_message": {
                "message_id": 9,
                "date": 1699999990,
                "chat": {"id": -100500, "type": "supergroup", "title": "Forum"},
                "from": {"id": 42, "is_bot": True, "first_name": "GW", "username": "gw_bot"},
                "text": "earlier answer",
                "entities": [{"type": "bold", "offset": 0, "length": 7}],
                "reply_markup": {
                    "inline_keyboard": [
                        [
                            {"text": "open", "url": "https://example.org"},
                            {"text": "again", "callback_data": "again:9"},
                        ]
                    ]
                },
            },
            "quote": {"text": "earlier", "position": 0, "is_manual": True},
            "forward_origin": {
                "type": "user",
                "date": 1699990000,
                "sender_user": {"id": 1003, "is_bot": False, "first_name": "Carol"},
            },
        },
    },
    {
        "update_id": 2,
        "edited_message": {
            "message_id": 10,
            "date": 1700000000,
            "edit_date": 1700000100,
            "chat": {"id": 1001, "type": "private", "first_name": "Alice"},
            "from": {"id": 1001, "is_bot": False, "first_name": "Alice"},
            "caption": "a photo, edited",
            "caption_entities": [{"type": "italic", "offset": 2, "length": 5}],
            "photo": [
                {
                    "file_id": "p1",
                    "file_unique_id": "u1",
                    "width": 90,
                    "height": 60,
                    "file_size": 1200,
                },
                {"file_id": "p2", "file_unique_id": "u2", "width": 900, "height": 600},
            ],
            "document": {
                "file_id": "d1",
                "file_unique_id": "du1",
                "file_name": "notes.txt",
                "mime_type": "text/plain",
            },
        },
    },
    {
        "update_id": 3,
        "my_chat_member": {
            "chat": {"id": -100600, "type": "group", "title": "Team"},
            "from": {"id": 1001, "is_bot": False, "first_name": "Alice"},
            "date": 1700000200,
            "old_chat_member": {
                "status": "member",
                "user": {"id": 42, "is_bot": True, "first_name": "GW"},
            },
            "new_chat_member": {
                "status": "administrator",
                "user": {"id": 42, "is_bot": True, "first_name": "GW"},
                "can_be_edited": False,
                "is_anonymous": False,
                "can_manage_chat": True,
                "can_delete_messages": True,
                "can_manage_video_chats": False,
                "can_restrict_members": True,
                "can_promote_members": False,
                "can_change_info": True,
                "can_invite_users": True,
                "can_post_stories": False,
                "can_edit_stories": False,
                "can_delete_stories": False,
                "can_send_welcome_messages": False,
                "custom_title": "helper",
            },
        },
    },
    {
        "update_id": 4,
        "my_chat_member": {
            "chat": {"id": 1001, "type": "private", "first_name": "Alice"},
            "from": {"id": 1001, "is_bot": False, "first_name": "Alice"},
            "date": 1700000300,
            "old_chat_member": {
                "status": "member",
                "user": {"id": 42, "is_bot": True, "first_name": "GW"},
            },
            "new_chat_member": {
                "status": "kicked",
                "user": {"id": 42, "is_bot": True, "first_name": "GW"},
                "until_date": 0,
            },
        },
    },
    {
        "update_id": 5,
        "channel_post": {
            "message_id": 3,
            "date": 1700000400,
            "chat": {"id": -100700, "type": "channel", "title": "News"},
            "sender_chat": {"id": -100700, "type": "channel", "title": "News"},
            "text": "hello",
        },
    },
]

SENT = {
    "ok": True,
    "result": {
        "message_id": 77,
        "date": 1700000500,
        "chat": {"id": 1001, "type": "private"},
        "from": {"id": 42, "is_bot": True, "first_name": "GW"},
        "text": "done",
        "entities": [{"type": "code", "offset": 0, "length": 4}],
    },
}


def shape(value: Any) -> Any:
    """A model as nested dicts that also name each object's
    class (which union member pydantic picked)."""
    from pydantic import BaseModel

    if isinstance(value, BaseModel):
        fields = {name: shape(getattr(value, name)) for name in type(value).model_fields}
        return {
            "__class__": type(value).__name__,
            **{k: v for k, v in fields.items() if v is not None},
        }
    if isinstance(value, list | tuple):
        return [shape(item) for item in value]
    if isinstance(value, datetime):
        return value.isoformat()
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return repr(value)


def requests(bot: Any) -> list[dict[str, Any]]:
    """The form fields aiogram's session would post for the calls the adapter makes."""
    from aiogram.enums import ChatAction
    from aiogram.methods import (
        DeleteWebhook,
        GetUpdates,
        SendChatAction,
        SendMessage,
        SetMyCommands,
        SetWebhook,
    )
    from aiogram.types import (
        BotCommand,
        InlineKeyboardButton,
        InlineKeyboardMarkup,
        MessageEntity,
        ReplyParameters,
    )

    calls: list[Any] = [
        SendMessage(
            chat_id=-100500,
            text="𝔸nswer **x**",
            message_thread_id=7,
            entities=[
                MessageEntity(type="bold", offset=0, length=3),
                MessageEntity(type="text_link", offset=4, length=1, url="https://e.org"),
            ],
            reply_parameters=ReplyParameters(message_id=10, allow_sending_without_reply=True),
            reply_markup=InlineKeyboardMarkup(
                inline_keyboard=[[InlineKeyboardButton(text="a", callback_data="b")]]
            ),
        ),
        SendMessage(chat_id=1001, text="plain", parse_mode=None),
        SendChatAction(chat_id=1001, action=ChatAction.TYPING, message_thread_id=3),
        SetMyCommands(
            commands=[
                BotCommand(command="new", description="Start a new session"),
                BotCommand(command="stop", description="Stop the answer"),
            ]
        ),
        GetUpdates(offset=5, timeout=30, allowed_updates=["message", "my_chat_member"]),
        SetWebhook(
            url="https://example.org/hook", secret_token="s3cret", drop_pending_updates=True
        ),
        DeleteWebhook(drop_pending_updates=False),
    ]
    out = []
    for call in calls:
        files: dict[str, Any] = {}
        fields = {
            key: bot.session.prepare_value(value, bot=bot, files=files)
            for key, value in call.model_dump(warnings=False).items()
        }
        out.append({"method": call.__api_method__, **{k: v for k, v in fields.items() if v}})
    return out


def main(mode: str) -> dict[str, Any]:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s %(message)s")
    if mode == "fallback":
        from pydantic._internal import _config

        original = _config.ConfigWrapper.for_model.__func__  # type: ignore[attr-defined]

        def for_model(
            cls: Any,
            bases: Any,
            namespace: Any,
            raw_annotations: Any,
            kwargs: Any,
            new_option: bool = False,
        ) -> Any:
            return original(cls, bases, namespace, raw_annotations, kwargs)

        _config.ConfigWrapper.for_model = classmethod(for_model)  # type: ignore[assignment]
    if mode in ("deferred", "fallback"):
        import adapters.telegram.adapter  # noqa: F401 - the adapter's own import path
    import aiogram
    from aiogram import Bot
    from aiogram.methods import SendMessage
    from aiogram.types import Update
    from pydantic import BaseModel

    models = [
        obj
        for name, module in list(sys.modules.items())
        if name.startswith("aiogram.types.")
        for obj in vars(module).values()
        if isinstance(obj, type) and issubclass(obj, BaseModel) and obj.__module__ == name
    ]
    built_after_import = sum(model.__pydantic_complete__ for model in models)
    bot = Bot(BOT_TOKEN)
    updates = [Update.model_validate(raw, context={"bot": bot}) for raw in UPDATES]
    response = bot.session.check_response(
        bot, SendMessage(chat_id=1001, text="done"), 200, json.dumps(SENT)
    )
    return {
        "aiogram": aiogram.__version__,
        "types": len(models),
        "built_after_import": built_after_import,
        "updates": [shape(update) for update in updates],
        "dumps": [update.model_dump(mode="json", exclude_unset=True) for update in updates],
        "requests": requests(bot),
        "response": shape(response.result),
    }


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1]), ensure_ascii=False, sort_keys=True))
