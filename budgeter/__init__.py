"""budgeter: exact, failure-aware context-window management for LLM agents."""

__version__ = "0.1.0"
