"""memfold[langchain] against a live service: RunnableWithMessageHistory and a LangChain 1.x agent middleware."""

from __future__ import annotations

import time
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables.history import RunnableWithMessageHistory

from memfold.adapters.langchain import MemfoldChatMessageHistory, MemfoldMiddleware
from memfold.client import Client

pytestmark = pytest.mark.timeout(120)


class RecordingChatModel(GenericFakeChatModel):
    """langchain-core's fake chat model, keeping the messages of every call it answers."""

    seen: list = []

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any):
        self.seen.append(list(messages))
        return super()._generate(messages, *args, **kwargs)


@pytest.mark.filterwarnings("ignore:RunnableWithMessageHistory is deprecated")  # still widely used; supported
def test_runnable_with_message_history_keeps_turns_in_memfold(service):
    client = Client(service.url, service.key("lc", "writer"))
    model = RecordingChatModel(messages=iter([AIMessage("Hello Ada."), AIMessage("Order #4401 left on Monday.")]),
                               seen=[])
    prompt = ChatPromptTemplate.from_messages([MessagesPlaceholder("history"), ("human", "{input}")])
    chain = RunnableWithMessageHistory(
        prompt | model, lambda session_id: MemfoldChatMessageHistory(session_id, client),
        input_messages_key="input", history_messages_key="history",
    )
    config = {"configurable": {"session_id": "lc-thread-1"}}
    assert chain.invoke({"input": "Hi, I am Ada."}, config=config).content == "Hello Ada."
    assert chain.invoke({"input": "Where is order #4401?"}, config=config).content == "Order #4401 left on Monday."
    assert [m.content for m in model.seen[1]] == ["Hi, I am Ada.", "Hello Ada.", "Where is order #4401?"]
    stored = client.messages("lc-thread-1")
    assert [(m.role, m.content) for m in stored] == [
        ("user", "Hi, I am Ada."), ("assistant", "Hello Ada."),
        ("user", "Where is order #4401?"), ("assistant", "Order #4401 left on Monday."),
    ]
    history = MemfoldChatMessageHistory("lc-thread-1", client, context_budget=500)
    assert [m.type for m in history.messages] == ["human", "ai", "human", "ai"]
    assert MemfoldChatMessageHistory("never-used", client).messages == []
    client.close()


def test_agent_middleware_shows_the_model_memfolds_context(service):
    client = Client(service.url, service.key("lc", "writer"))
    earlier = [{"role": "user" if i % 2 == 0 else "assistant",
                "content": f"turn {i}: my booking reference is BK-{7000 + i} for flight LX{100 + i}"} for i in range(30)]
    client.append("agent-thread", earlier)
    for _ in range(200):  # 30 messages pass the summary trigger: let the summary land
        summaries = client.summaries("agent-thread")
        if summaries and all(s["status"] != "processing" for s in summaries):
            break
        time.sleep(0.05)
    model = RecordingChatModel(messages=iter([AIMessage("Your first booking was BK-7000.")]), seen=[])
    agent = create_agent(model=model, tools=[], middleware=[MemfoldMiddleware(client, budget=600)])
    result = agent.invoke({"messages": [HumanMessage("What was my first booking reference?")]},
                          config={"configurable": {"thread_id": "agent-thread"}})
    assert result["messages"][-1].content == "Your first booking was BK-7000."
    shown = model.seen[0]
    assert shown[0].type == "system" and "BK-70" in shown[0].content  # memory, not the raw turns
    assert shown[-1].content == "What was my first booking reference?"
    assert len(shown) < 31
    stored = client.messages("agent-thread", limit=100)
    assert [m.content for m in stored[-2:]] == ["What was my first booking reference?", "Your first booking was BK-7000."]
    assert len(stored) == 32  # the question and the answer, each once
    client.close()


def test_a_history_and_a_middleware_of_a_user_store_the_user(service):
    client = Client(service.url, service.key("lc-users", "writer"))
    MemfoldChatMessageHistory("lc-mon", client, user_id="ada").add_messages([HumanMessage("My order is #4401.")])
    model = RecordingChatModel(messages=iter([AIMessage("It is #4401.")]), seen=[])
    agent = create_agent(model, middleware=[MemfoldMiddleware(client, budget=1000)])
    agent.invoke({"messages": [HumanMessage("What was my order number?", id="q-1")]},
                 config={"configurable": {"thread_id": "lc-tue", "user_id": "ada"}})
    assert {h["conversation_id"] for h in client.search_user("ada", "order")} == {"lc-mon", "lc-tue"}
    shown = "\n".join(m.content for m in model.seen[0])
    assert "#4401" in shown and "conversation lc-mon" in shown  # the model saw what the other thread taught
