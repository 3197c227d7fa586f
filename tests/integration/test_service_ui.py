"""The /ui page in headless Chromium against a live service: what a person sees after connecting with a key."""

from __future__ import annotations

import os
import shutil

import pytest
from fixtures.memfold_service import LiveService, settled

from memfold.client import Client

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"no Chromium at {CHROMIUM} (apt-get install chromium)"),
]
LOW_TRIGGER = {"MEMFOLD_POLICY": "hierarchical", "MEMFOLD_POLICIES": "hierarchical",
               "MEMFOLD_HIERARCHICAL__TRIGGER_MESSAGE_COUNT": "6", "MEMFOLD_HIERARCHICAL__RECENT_MESSAGE_COUNT": "2",
               "MEMFOLD_HIERARCHICAL__RESUMMARIZE_EVERY": "4"}
LINES = [
    "Hi, my name is Dana Whitfield and my order number is #48213.", "Thanks Dana, looking it up.",
    "It arrived broken, I paid $184.50.", "Sorry to hear that.", "Can you refund it?", "Checking the policy.",
    "Any news?", "Still checking.",
    "Correction: my order number is #59177, the other one was my old order.", "Noted, #59177.",
    "So the refund is for #59177.", "Yes.", "When will it arrive?", "Within 14 days.",
]


def test_page_shows_versions_facts_and_context(tmp_path):
    from playwright.sync_api import expect, sync_playwright

    service = LiveService.start(tmp_path / "ui", env=LOW_TRIGGER)
    try:
        key = service.key("ui-co", "reader")
        with Client(service.url, service.key("ui-co", "writer")) as client:
            for start in range(0, len(LINES), 4):  # paced, so several summary versions complete
                client.append("refund-48213", [{"role": "user" if (start + i) % 2 == 0 else "assistant", "content": text}
                                               for i, text in enumerate(LINES[start:start + 4])])
                settled(client, "refund-48213")
            client.add("other-chat", "user", "hello")
            trail = client.audit("refund-48213")
        completed = [s for s in trail["summaries"] if s["status"] == "completed"]
        assert len(completed) >= 2 and any(f["superseded_by"] for f in trail["facts"])

        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=[
                "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--disable-component-update", "--disable-sync"])
            try:
                tab = browser.new_page(viewport={"width": 1500, "height": 950})
                tab.goto(service.url + "/ui")
                tab.fill("#key", key)
                tab.click("#connect")
                expect(tab.locator("#who")).to_have_text("tenant ui-co · reader key")
                expect(tab.locator("#conversations li")).to_have_count(2)
                tab.click("#conversations li[data-id='refund-48213']")

                versions = tab.locator("#timeline .version")
                expect(versions).to_have_count(len(trail["summaries"]))
                first = completed[0]
                covered = first["covers"][1] - first["covers"][0] + 1
                expect(versions.first.locator("summary")).to_have_text(f"{covered} covered messages")
                versions.first.locator("summary").click()
                expect(versions.first.locator(".covered li").first).to_contain_text("Dana Whitfield")

                changed = tab.locator("#facts tr.retired")
                expect(changed.first).to_contain_text("#48213")
                expect(changed.first).to_contain_text("(changed)")
                expect(tab.locator("#facts")).to_contain_text("#59177")

                versions.first.locator(".meta").click()  # the memory in force at version 1
                expect(tab.locator("#facts-title")).to_have_text("Facts in force at hierarchical v1")
                expect(tab.locator("#facts")).to_contain_text("#48213")
                expect(tab.locator("#facts")).not_to_contain_text("#59177")
                # ... and the context as it was right after that version was produced (time travel)
                expect(tab.locator("#asof")).to_have_value(first["resolved_position"])
                expect(tab.locator("#context p")).to_contain_text(f"as of {first['resolved_position']}")
                expect(tab.locator("#context")).not_to_contain_text("Within 14 days.")
                versions.first.locator(".meta").click()  # unselect: back to now
                expect(tab.locator("#asof")).to_have_value("")
                expect(tab.locator("#context")).to_contain_text("Within 14 days.")

                expect(tab.locator("#context .msg.memory").first).to_be_visible()
                tab.fill("#budget", "600")  # room for the memory (never trimmed): facts + dated statements
                tab.click("#refresh")
                expect(tab.locator("#context p")).to_contain_text("tokens")
                shown = int(tab.locator("#context p").inner_text().split(" · ")[1].split()[0])
                assert 0 < shown <= 600
                expect(tab.locator("#error")).to_have_text("")
                tab.screenshot(path=str(tmp_path / "ui.png"), full_page=True)
                if os.environ.get("MEMFOLD_UI_SCREENSHOT"):  # how docs/ui.png is made
                    shutil.copy(tmp_path / "ui.png", os.environ["MEMFOLD_UI_SCREENSHOT"])
            finally:
                browser.close()
    finally:
        service.stop()


def test_page_shows_tool_calls_and_the_tools_name(service):
    from playwright.sync_api import expect, sync_playwright

    key = service.key("ui-tools", "reader")
    with Client(service.url, service.key("ui-tools", "writer")) as client:
        client.append("tools-1", [
            {"role": "user", "content": "Where is order #4411?"},
            {"role": "assistant", "content": None, "refusal": None, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "lookup_order", "arguments": '{"order": "#4411"}'}}]},
            {"role": "tool", "tool_call_id": "call_1", "name": "lookup_order", "content": "shipped on Monday"},
            {"role": "assistant", "content": "Good news: it is on its way."},
        ])
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=[
            "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync"])
        try:
            tab = browser.new_page()
            tab.goto(service.url + "/ui")
            tab.fill("#key", key)
            tab.click("#connect")
            tab.locator("#conversations li", has_text="tools-1").click()
            call = tab.locator("#context .msg .call")
            expect(call).to_have_count(1)
            expect(call).to_have_text('→ lookup_order({"order": "#4411"})')  # not an empty bubble
            expect(tab.locator("#context .msg", has_text="shipped on Monday").locator(".kind")).to_contain_text(
                "tool (lookup_order)")
            expect(tab.locator("#error")).to_have_text("")
        finally:
            browser.close()


def test_page_shows_a_users_facts_and_the_conversation_each_came_from(tmp_path):
    from playwright.sync_api import expect, sync_playwright

    service = LiveService.start(tmp_path / "ui-users", env=LOW_TRIGGER)
    try:
        key = service.key("ui-users", "reader")
        with Client(service.url, service.key("ui-users", "writer")) as client:
            for conversation, first in (("monday", "I live in Berlin."), ("tuesday", "I moved to Munich last week.")):
                client.append(conversation, [{"role": "user" if i % 2 == 0 else "assistant",
                                              "content": first if i == 0 else f"Noted, turn {i}."} for i in range(8)],
                              user_id="dana")
                settled(client, conversation)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=[
                "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--disable-component-update", "--disable-sync"])
            try:
                tab = browser.new_page(viewport={"width": 1500, "height": 950})
                tab.goto(service.url + "/ui")
                tab.fill("#key", key)
                tab.click("#connect")
                expect(tab.locator("#conversations li")).to_have_count(2)
                tab.fill("#user", "dana")
                tab.click("#show-user")
                expect(tab.locator("#facts-title")).to_have_text("Memory of user dana (2 conversations)")
                berlin = tab.locator("#user-facts tr.retired", has_text="Berlin")
                expect(berlin).to_contain_text("monday")
                expect(berlin).to_contain_text("Munich (tuesday)")
                current = tab.locator("#user-facts tr:not(.retired)", has_text="Munich")
                expect(current).to_contain_text("tuesday")
                current.locator("a").click()  # the conversation it came from opens
                expect(tab.locator("#conversations li.selected")).to_have_attribute("data-id", "tuesday")
                tab.fill("#user", "nobody")
                tab.click("#show-user")
                expect(tab.locator("#error")).to_contain_text("404")
            finally:
                browser.close()
    finally:
        service.stop()
