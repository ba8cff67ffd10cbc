"""`/model` in the web chat: the list comes with buttons (a `choices` frame on the tab's socket);
a click switches the conversation like `/model NAME` and the next request goes to the chosen model
(what the fake model server received). The web chat's person is the local owner, an admin."""

from __future__ import annotations

from pathlib import Path

from gateway.config.settings import load_config
from gateway.ops.daemon import Daemon
from gateway.ops.wiring import build_gateway, platform_adapters
from tests.fakes.llm import FakeLLM
from tests.helpers import write_config
from tests.test_webchat_approvals import request, tab


async def test_a_click_on_the_model_list_switches_the_conversation(
    home: Path, fake_llm: FakeLLM
) -> None:
    models = (
        f"models:\n  fast:\n    provider: openai\n    name: gpt-fast\n"
        f"    base_url: {fake_llm.openai_base_url}\n    api_key: test-key\n    max_retries: 0\n"
    )
    write_config(home, base_url=fake_llm.base_url, extra="web:\n  port: 0\n" + models)
    config = load_config(home, env={})
    gw = build_gateway(config, env={}, adapters=platform_adapters(config), probe_ollama=False)
    running = Daemon(gw, install_signals=False)
    await running.start()
    try:
        async with tab(home, running.web_port or 0) as owner:
            await owner.say("/model")
            listed = await owner.wait(request)
            options = {o["label"]: o["value"] for o in listed["choices"]["options"]}
            assert list(options) == ["▸ default: claude-test", "fast: gpt-fast"]
            await owner.click(listed["choices"], options["fast: gpt-fast"])
            switched = "Switched to fast (gpt-fast). Your next message is answered by it."
            await owner.wait(lambda f: f.get("text") == switched)
            await owner.say("and now?")
            await owner.wait(lambda f: f["type"] == "message" and f["kind"] == "reply")
        assert [r["model"] for r in fake_llm.openai_requests()] == ["gpt-fast"]
    finally:
        await running.stop()
