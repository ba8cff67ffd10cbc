"""Scheduled jobs: reminders and recurring runs the
agent sets up from a chat, delivered to that chat.

`when` (when-text → a Schedule, cron through APScheduler's CronTrigger), `text` (how jobs and runs
read to people, the model and the operator), `book` (create / list / cancel with their limits; the
`schedule` tool and `/jobs` go through it), `turn` (one run as an agent turn in its own `cron`
session, recorded in the chat's session and delivered through the outbox), `runner` (the timers over
every job's next run, boot catch-up, claims, the run-time access check) and `command` (`/jobs`).
`jobstore` holds their rows and queries. Imports sessions, access and everything below them; only
ops/ and cli/ import it.
"""
