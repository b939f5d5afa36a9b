"""The LLM judge: prompt building, in-context examples and output parsing."""
