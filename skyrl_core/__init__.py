"""skyrl: train and evaluate multi-turn, tool-using LLM agents with reinforcement learning.

The public surface a plugin needs is re-exported here; heavy modules (engines, trainer) import lazily.
"""

from .hookspecs import hookimpl
from .tasks import DataSpec, Instance, Task, VerifierResult
from .tools import AgentState, Tool, ToolCall, ToolContext, ToolResult
from .transitions import Datum, Trajectory, TrainingBatch, Transition, record_transition

__version__ = "0.1.0"

__all__ = [
    "hookimpl", "Tool", "ToolCall", "ToolContext", "ToolResult", "AgentState", "Task", "Instance", "DataSpec",
    "VerifierResult", "Transition", "Trajectory", "Datum", "TrainingBatch", "record_transition", "__version__",
]
