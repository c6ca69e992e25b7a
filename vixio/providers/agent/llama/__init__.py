"""The in-process llama.cpp backend: the model for openai-agents, its GGUF weights, chat template flattening and tool calls."""
