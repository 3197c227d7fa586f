"""Adapters: memfold where users already keep memory (LangChain, OpenAI Agents SDK, MCP); each an optional extra."""
