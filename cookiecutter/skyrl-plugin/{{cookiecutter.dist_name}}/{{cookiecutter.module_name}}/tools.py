"""A working example tool: count a letter in a text (stateless; replace with your own)."""

from skyrl_core import Tool, ToolContext, ToolResult


async def count_letters(args: dict, ctx: ToolContext) -> ToolResult:
    return ToolResult(output=str(args["text"].count(args["letter"])))


count_letters_tool = Tool(
    name="{{ cookiecutter.entry_point }}_count_letters",
    description="Count how often a letter occurs in a text.",
    parameters={
        "type": "object",
        "properties": {
            "text": {"type": "string", "description": "the text to search"},
            "letter": {"type": "string", "minLength": 1, "maxLength": 1, "description": "one character"},
        },
        "required": ["text", "letter"],
        "additionalProperties": False,
    },
    handler=count_letters,
)
