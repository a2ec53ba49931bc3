"""The pure core: messages, counting interfaces, JSON-argument handling and compaction.

Nothing here imports grpc, redis, protobuf or transformers (a test checks it).
"""

from budgeter.core.engine import BuildResult, Engine, trim
from budgeter.core.markers import contains_marker, find_markers
from budgeter.core.messages import Message, ToolCall, from_openai, to_openai
from budgeter.core.policy import FileTools, Policy

__all__ = [
    "BuildResult",
    "FileTools",
    "Message",
    "Policy",
    "Engine",
    "ToolCall",
    "contains_marker",
    "find_markers",
    "from_openai",
    "to_openai",
    "trim",
]
