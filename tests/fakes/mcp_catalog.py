"""A catalog of realistic MCP tools for tool search (tests/fakes/mcp_server.py offers them with
`"catalog": N`): 60 hand-written tools across the usual servers' domains (weather, calendar, mail,
files, code hosting, notes, …), one of them the weather forecast, and `catalog(n)` for more (each
base tool again for another account).

Pure data: no `mcp` import, so a bench can build the same tools as specs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Param:
    name: str
    type: type
    description: str
    required: bool = True


@dataclass(frozen=True, slots=True)
class FakeTool:
    name: str
    description: str
    params: tuple[Param, ...]

    @property
    def read_only(self) -> bool:
        verb = self.name.split("_")[0]
        return verb in ("get", "list", "search", "find", "read", "lookup", "weather", "convert")

    @property
    def destructive(self) -> bool:
        return self.name.split("_")[0] in ("delete", "remove", "cancel", "archive")

    def schema(self) -> dict[str, Any]:
        """The input schema the SDK derives for it (as tests/fakes/mcp_server.py offers it)."""
        kinds = {str: "string", int: "integer", float: "number", bool: "boolean"}
        properties = {
            p.name: {"type": kinds[p.type], "description": p.description} for p in self.params
        }
        return {
            "type": "object",
            "properties": properties,
            "required": [p.name for p in self.params if p.required],
        }


def _p(name: str, kind: type, description: str, required: bool = True) -> Param:
    return Param(name, kind, description, required)


_CITY = _p("city", str, "City name, e.g. Oslo")
_QUERY = _p("query", str, "Words to search for")
_PATH = _p("path", str, "Path of the file, relative to the workspace")
_REPO = _p("repo", str, "Repository as owner/name")
_LIMIT = _p("limit", int, "At most this many results", False)

BASE: tuple[FakeTool, ...] = (
    FakeTool(
        "weather_forecast",
        "Get the weather forecast for a city for the next days: temperature, rain and wind.",
        (_CITY, _p("days", int, "How many days ahead, 1 to 7", False)),
    ),
    FakeTool(
        "weather_alerts",
        "List active severe weather warnings (storms, floods, heat) for a region.",
        (_p("region", str, "Region or country code"),),
    ),
    FakeTool(
        "get_air_quality",
        "Get the air quality index and pollen levels at a location.",
        (_p("location", str, "Place name or lat,lon"),),
    ),
    FakeTool(
        "geocode_address",
        "Turn a street address into latitude and longitude.",
        (_p("address", str, "The address to look up"),),
    ),
    FakeTool(
        "get_directions",
        "Route between two places by car, bike, public transport or on foot.",
        (
            _p("origin", str, "Start address"),
            _p("destination", str, "End address"),
            _p("mode", str, "driving, cycling, transit or walking", False),
        ),
    ),
    FakeTool(
        "find_places",
        "Find restaurants, shops and other places near a location.",
        (_QUERY, _p("near", str, "Place or address to search around"), _LIMIT),
    ),
    FakeTool(
        "get_timezone",
        "The time zone and current local time of a place.",
        (_p("place", str, "City or address"),),
    ),
    FakeTool(
        "list_calendar_events",
        "List the events of a calendar between two dates.",
        (_p("start", str, "First day, YYYY-MM-DD"), _p("end", str, "Last day, YYYY-MM-DD")),
    ),
    FakeTool(
        "create_calendar_event",
        "Create a calendar event with a title, start, end and attendees.",
        (
            _p("title", str, "What the event is"),
            _p("start", str, "Start, ISO 8601"),
            _p("end", str, "End, ISO 8601"),
            _p("attendees", str, "Comma-separated e-mail addresses", False),
        ),
    ),
    FakeTool(
        "delete_calendar_event",
        "Delete a calendar event by its id.",
        (_p("event_id", str, "The event's id"),),
    ),
    FakeTool(
        "find_free_slot",
        "Find a free time slot in several people's calendars for a meeting.",
        (
            _p("people", str, "Comma-separated e-mail addresses"),
            _p("minutes", int, "Length of the meeting"),
        ),
    ),
    FakeTool(
        "send_email",
        "Send an e-mail message to one or more recipients.",
        (
            _p("to", str, "Recipient addresses"),
            _p("subject", str, "Subject line"),
            _p("body", str, "Message text"),
        ),
    ),
    FakeTool(
        "search_email",
        "Search the mailbox for messages by sender, subject or words.",
        (_QUERY, _LIMIT),
    ),
    FakeTool(
        "read_email",
        "Read one e-mail message with its attachments' names.",
        (_p("message_id", str, "The message's id"),),
    ),
    FakeTool(
        "archive_email",
        "Move an e-mail message out of the inbox into the archive.",
        (_p("message_id", str, "The message's id"),),
    ),
    FakeTool("read_file", "Read a text file from the workspace.", (_PATH,)),
    FakeTool(
        "write_file",
        "Create or overwrite a text file in the workspace.",
        (_PATH, _p("content", str, "The file's new content")),
    ),
    FakeTool("list_directory", "List the files and folders in a workspace directory.", (_PATH,)),
    FakeTool("delete_file", "Delete a file from the workspace.", (_PATH,)),
    FakeTool(
        "search_files",
        "Search file names and contents in the workspace for a pattern.",
        (_QUERY, _LIMIT),
    ),
    FakeTool(
        "move_file",
        "Move or rename a file in the workspace.",
        (_p("source", str, "Current path"), _p("target", str, "New path")),
    ),
    FakeTool(
        "list_issues",
        "List the open issues of a repository, optionally by label.",
        (_REPO, _p("label", str, "Only issues with this label", False)),
    ),
    FakeTool(
        "create_issue",
        "Open a new issue in a repository.",
        (_REPO, _p("title", str, "Issue title"), _p("body", str, "Issue description")),
    ),
    FakeTool(
        "comment_on_issue",
        "Add a comment to an issue or pull request.",
        (_REPO, _p("number", int, "Issue or pull request number"), _p("body", str, "The comment")),
    ),
    FakeTool("list_pull_requests", "List the open pull requests of a repository.", (_REPO,)),
    FakeTool(
        "merge_pull_request",
        "Merge a pull request into its base branch.",
        (_REPO, _p("number", int, "Pull request number")),
    ),
    FakeTool(
        "get_file_contents",
        "Get a file's contents from a repository at a branch or commit.",
        (_REPO, _PATH, _p("ref", str, "Branch, tag or commit", False)),
    ),
    FakeTool("search_code", "Search source code across repositories.", (_QUERY, _LIMIT)),
    FakeTool(
        "list_commits",
        "List recent commits of a repository branch.",
        (_REPO, _p("branch", str, "Branch name", False)),
    ),
    FakeTool(
        "create_note",
        "Create a note with a title and Markdown text.",
        (_p("title", str, "Note title"), _p("text", str, "Note text in Markdown")),
    ),
    FakeTool("search_notes", "Full-text search through all notes.", (_QUERY, _LIMIT)),
    FakeTool("delete_note", "Delete a note by its title.", (_p("title", str, "Note title"),)),
    FakeTool(
        "add_todo",
        "Add an item to the to-do list, with an optional due date.",
        (_p("task", str, "What to do"), _p("due", str, "Due date, YYYY-MM-DD", False)),
    ),
    FakeTool("list_todos", "List open to-do items, soonest due first.", (_LIMIT,)),
    FakeTool("complete_todo", "Mark a to-do item as done.", (_p("todo_id", str, "The item's id"),)),
    FakeTool(
        "get_stock_quote",
        "Get the latest price of a stock or fund by its ticker symbol.",
        (_p("symbol", str, "Ticker symbol, e.g. AAPL"),),
    ),
    FakeTool(
        "convert_currency",
        "Convert an amount between currencies at today's exchange rate.",
        (
            _p("amount", float, "Amount of money"),
            _p("source", str, "Currency code to convert from"),
            _p("target", str, "Currency code to convert to"),
        ),
    ),
    FakeTool(
        "list_transactions",
        "List bank account transactions in a date range.",
        (_p("account", str, "Account id"), _p("since", str, "First day, YYYY-MM-DD")),
    ),
    FakeTool(
        "translate_text",
        "Translate text into another language.",
        (_p("text", str, "Text to translate"), _p("language", str, "Target language code")),
    ),
    FakeTool(
        "detect_language",
        "Detect which language a text is written in.",
        (_p("text", str, "The text"),),
    ),
    FakeTool(
        "summarize_url",
        "Fetch a web page and summarize it in a few sentences.",
        (_p("url", str, "The page's address"),),
    ),
    FakeTool("search_news", "Search recent news articles by topic.", (_QUERY, _LIMIT)),
    FakeTool(
        "play_music",
        "Play a song, album or playlist on the speaker.",
        (_QUERY, _p("device", str, "Speaker name", False)),
    ),
    FakeTool(
        "set_thermostat",
        "Set the target temperature of a room's thermostat.",
        (_p("room", str, "Room name"), _p("celsius", float, "Target temperature in °C")),
    ),
    FakeTool(
        "turn_on_lights",
        "Switch lights on or off and set their brightness.",
        (
            _p("room", str, "Room name"),
            _p("on", bool, "On (true) or off (false)"),
            _p("brightness", int, "Brightness 0-100", False),
        ),
    ),
    FakeTool(
        "lock_door",
        "Lock or unlock a smart door lock.",
        (_p("door", str, "Door name"), _p("locked", bool, "Lock (true) or unlock (false)")),
    ),
    FakeTool(
        "query_database",
        "Run a read-only SQL query on the analytics database.",
        (_p("sql", str, "The SELECT statement"),),
    ),
    FakeTool("list_tables", "List the tables of the analytics database with their columns.", ()),
    FakeTool(
        "create_ticket",
        "Open a support ticket for a customer.",
        (_p("customer", str, "Customer e-mail"), _p("problem", str, "What is wrong")),
    ),
    FakeTool(
        "search_tickets", "Search support tickets by customer, status or words.", (_QUERY, _LIMIT)
    ),
    FakeTool(
        "send_sms",
        "Send a text message (SMS) to a phone number.",
        (_p("phone", str, "Phone number with country code"), _p("text", str, "Message text")),
    ),
    FakeTool(
        "lookup_contact",
        "Look up a contact's phone number, e-mail and address by name.",
        (_p("name", str, "The person's name"),),
    ),
    FakeTool(
        "book_flight",
        "Search and book a flight between two airports on a date.",
        (
            _p("origin", str, "Departure airport code"),
            _p("destination", str, "Arrival airport code"),
            _p("date", str, "Departure day, YYYY-MM-DD"),
        ),
    ),
    FakeTool(
        "track_package",
        "Track a parcel delivery by its tracking number.",
        (_p("tracking_number", str, "The carrier's tracking number"),),
    ),
    FakeTool(
        "get_exchange_rates",
        "Get today's exchange rates for a base currency.",
        (_p("base", str, "Currency code"),),
    ),
    FakeTool(
        "create_invoice",
        "Create an invoice for a customer with line items.",
        (_p("customer", str, "Customer name"), _p("items", str, "Line items as text")),
    ),
    FakeTool(
        "list_deployments",
        "List recent deployments of a service and their status.",
        (_p("service", str, "Service name"),),
    ),
    FakeTool(
        "restart_service",
        "Restart a running service in production.",
        (_p("service", str, "Service name"),),
    ),
    FakeTool(
        "get_metrics",
        "Get CPU, memory and request metrics of a service over the last hour.",
        (_p("service", str, "Service name"),),
    ),
    FakeTool(
        "cancel_subscription",
        "Cancel a customer's subscription at the end of the billing period.",
        (_p("customer", str, "Customer e-mail"),),
    ),
)
ACCOUNTS = ("work", "team", "family", "club", "lab", "shop", "school", "studio", "office")


def catalog(n: int) -> list[FakeTool]:
    """The first `n` tools: the 60 base tools, then each again for another account
    (`<name>_<account>`)."""
    found = list(BASE[:n])
    for account in ACCOUNTS:
        for tool in BASE:
            if len(found) >= n:
                return found
            text = f"{tool.description} Uses the {account} account."
            found.append(FakeTool(f"{tool.name}_{account}", text, tool.params))
    return found[:n]


def forecast(city: str, days: int | None = None) -> str:
    """What the fake weather_forecast answers."""
    return f"Forecast for {city}: sunny, 18 °C, light wind for the next {days or 3} days."
