"""The openai-agents backend of the agent provider: the provider, its OpenAI clients and HTTP transport, tool conversion, history, run failures and deadlines."""
