"""Adapter tests import aiogram the way the daemon does (models built on first use), before any test
module does.
"""

from __future__ import annotations

import adapters.telegram.aiogram_import  # noqa: F401
