"""The example tool: count a letter in a text.

A stateless tool (it needs no runtime). A tool that acts on files or runs commands uses ``ctx.runtime`` instead
(``await ctx.runtime.exec(...)``, ``await ctx.runtime.read_file(...)``): the runtime is the trajectory's sandbox,
and nothing the model writes should ever run outside it.
"""

from skyrl_core import Tool, ToolContext, ToolResult


async def count_letters(args: dict, ctx: ToolContext) -> ToolResult:
    """Return how often ``args["letter"]`` (one character) occurs in ``args["text"]``, as a decimal string.
    The arguments were already validated against the tool's JSON Schema by the agent loop."""
    return ToolResult(output=str(args["text"].count(args["letter"])))


count_letters_tool = Tool(
    name="{{ cookiecutter.entry_point }}_count_letters",
    description="Count how often a letter occurs in a text.",
    parameters={
        "type": "object",
        "properties": {
            "text": {"type": "string", "maxLength": 10000, "description": "the text to search"},
            "letter": {"type": "string", "minLength": 1, "maxLength": 1, "description": "one character"},
        },
        "required": ["text", "letter"],
        "additionalProperties": False,
    },
    handler=count_letters,
)
