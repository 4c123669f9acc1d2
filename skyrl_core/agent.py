"""The agent loop: generate, parse tool calls, run tools, append observations, until a finish condition.

Token-in/token-out (SkyRL-Agent, arXiv 2511.16108, Sec. 3.3): the prompt is kept as token ids. The chat
template is applied once (the registered chat format, :class:`skyrl_core.contracts.ChatFormat`), generated ids are
appended exactly as sampled and only new messages are tokenised. Every LLM call goes through
:func:`skyrl_core.transitions.record_transition`, so the trajectory's transitions are the exact ids and logprobs
the engine saw and produced.

Finish reasons (``skyrl_core.transitions``): ``finished`` (the finish tool), ``no_tool_call`` (``agent.on_no_tool_call:
stop``, or nudges used up), ``max_turns``, ``context_exceeded`` (the prompt reached the context window, or a
generation was cut by it), ``max_tokens`` (a generation hit ``sampling.max_tokens``), ``timeout`` (an engine call
ran past its timeout), ``error_run`` (the engine raised, aborted or returned nothing). Limits and errors
loss-mask the trajectory (``MASKED_REASONS``).

Recoverable mistakes never end a trajectory: an unparseable call, an unknown tool, arguments failing the
tool's JSON Schema, a tool that raises or times out each get a corrective observation saying what was wrong and
what a valid call looks like (built from that tool's schema, or the list of valid tools), and the loop goes on.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any, Sequence

import attrs

from .contracts import ChatFormat, display_name, member
from .errors import RuntimeLost, ToolArgumentsError
from .inference.base import SamplingParams
from .multimodal import accepts_images, has_images, observation_message, openai_messages
from .plugins import get_registry
from .runtime import truncate_output
from .tools import Tool, ToolCall, ToolContext, ToolResult
from .transitions import (CONTEXT_EXCEEDED, ERROR_RUN, ERROR_RUNTIME, FINISHED, MASKED_REASONS, MAX_TOKENS,
                          MAX_TURNS, NO_TOOL_CALL, TIMEOUT, Trajectory, record_transition)

log = logging.getLogger(__name__)

# An observation longer than this many characters (or than agent.max_context_tokens characters, about a quarter
# of the context window for English text, whichever is smaller) keeps its head and tail with a note of how much
# was cut; the runtime caps command output too, but a tool may build its text any way it likes.
MAX_OBSERVATION_CHARS = 16000
NUDGE = ("You did not call a tool. Every reply must call exactly one of the tools ({names}), for example:\n"
         "{example}")


def with_system_text(messages: Sequence[dict], text: str) -> list[dict]:
    """A copy of ``messages`` with ``text`` appended to the system message (one is inserted when there is none)."""
    messages = [dict(m) for m in messages]
    if messages and messages[0].get("role") == "system":
        messages[0]["content"] = f"{messages[0].get('content') or ''}\n\n{text}".lstrip()
    else:
        messages.insert(0, {"role": "system", "content": text})
    return messages


class TransitionRecorder:
    """Wraps an engine for one trajectory; each ``generate`` call is recorded as a Transition.

    ``transitions`` is the trajectory's list (appended in place); set ``new_context`` after a context reset
    so the next call starts a new training datum.
    """

    def __init__(self, engine: Any, transitions: list) -> None:
        self.engine = engine
        self.transitions = transitions
        self.new_context = False
        self.chat_template_kwargs: dict = {}
        self.state: Any = None  # the live AgentState: a context holding images goes to generate_messages

    @record_transition
    async def generate(self, input_ids: list[int], sampling: SamplingParams):
        messages = getattr(self.state, "messages", None) or []
        if has_images(messages) and accepts_images(self.engine):
            out = await self.engine.generate_messages(openai_messages(messages), sampling)
        else:
            out = await self.engine.generate(input_ids, sampling)
        if out is None or getattr(out, "output_ids", None) is None:
            raise EngineReturnedNothing(f"engine '{display_name(self.engine, 'inference_engines')}' "
                                        f"returned no output ({out!r})")
        return out


class EngineReturnedNothing(RuntimeError):
    """The engine's generate returned None or an object without output ids."""


def _call_text(call_json: str, parser: Any) -> str:
    """A call (JSON ``{"name", "arguments"}``) written the way ``parser`` reads calls: its ``format_call`` (the
    parser contract's default is a ``<tool_call>`` tag around the JSON)."""
    call = json.loads(call_json)
    return member(parser, "parsers", "format_call")(call["name"], call.get("arguments") or {})


def _render_demonstrations(messages: list[dict], parser: Any, chat: ChatFormat, native_tools: bool) -> list[dict]:
    """Instruction-builder messages with worked examples (few-shot demonstrations) written for this run.

    A demonstration is given in OpenAI chat format: an assistant message with ``tool_calls`` (``function.name``,
    ``function.arguments`` as a JSON string or object) and ``tool`` messages with the results. Where the chat
    template renders tool calls itself (``native_tools``) they are passed on; otherwise each call is written into
    the assistant's content the way ``parser`` reads calls (its ``format_call``, or a ``<tool_call>`` tag), so
    the example teaches the format the parser will read. ``tool`` messages take the template's observation role.
    Raises ValueError naming the message when a demonstrated call has no name or unreadable arguments.
    """
    out = []
    for k, msg in enumerate(messages):
        msg = dict(msg)
        if msg.get("role") == "assistant" and msg.get("tool_calls") and not native_tools:
            parts = [msg.get("content") or ""]
            for call in msg.pop("tool_calls"):
                fn = call.get("function", call) if isinstance(call, dict) else {}
                name, args = fn.get("name"), fn.get("arguments", {})
                if isinstance(args, str):
                    try:
                        args = json.loads(args)
                    except json.JSONDecodeError as exc:
                        raise ValueError(f"instruction message {k}: tool call arguments are not JSON: {exc}") from None
                if not name or not isinstance(args, dict):
                    raise ValueError(f"instruction message {k}: a demonstrated tool call needs a 'name' and an "
                                     f"arguments object, got {call!r}")
                parts.append(_call_text(json.dumps({"name": name, "arguments": args}), parser))
            msg["content"] = "\n".join(p for p in parts if p)
        elif msg.get("role") == "tool" and chat.observation_role != "tool":
            msg["role"] = chat.observation_role
            msg.pop("tool_call_id", None)
        out.append(msg)
    return out


@attrs.define
class _LoopState:
    ids: list[int]
    turn: int = 0
    nudges: int = 0
    last_action: str | None = None
    repeats: int = 0


async def run_agent(trajectory: Trajectory, *, engine: Any, tools: dict[str, Tool], parser: Any,
                    chat: ChatFormat, agent_config: Any, sampling: SamplingParams, ctx: ToolContext,
                    engine_timeout_s: float | None = None, drift_check: bool = False) -> None:
    """Run one trajectory to a finish condition, filling ``trajectory`` in place.

    ``trajectory.messages`` holds the initial conversation (from the instruction builder) on entry and the
    whole transcript on return; ``ctx.state.messages`` is the agent's live context (equal to the transcript
    unless a tool reset the context). Sets ``transitions`` (via ``record_transition``), ``finish_reason``,
    ``answer``, ``turns`` (LLM calls), ``tool_calls`` (calls per tool name), ``masked`` and ``error``.
    ``engine_timeout_s`` bounds one engine call in seconds (None: no bound). ``drift_check`` re-renders the
    last generation's prompt with the chat template at the end and records how it differs from the ids the
    engine was sent (the chat format's optional ``check_drift``; none from a format without it). Never raises
    for engine, tool or model misbehaviour; cancellation propagates.
    """
    cfg = agent_config
    recorder = TransitionRecorder(engine, trajectory.transitions)
    recorder.chat_template_kwargs = dict(getattr(chat, "template_kwargs", None) or {})
    all_schemas = [t.schema() for t in tools.values()]
    example_tool = _preferred_example_tool(tools)
    tools_prompt = member(parser, "parsers", "tools_prompt")
    # A parser with its own call format describes the tools itself; the template then renders none (its
    # built-in tool instructions would teach a different format).
    schemas = [] if tools_prompt is not None else all_schemas

    def prepare(msgs: list[dict]) -> list[dict]:
        msgs = _render_demonstrations(msgs, parser, chat, native_tools=bool(schemas) and chat.tools_in_template)
        if tools_prompt is not None:
            return with_system_text(msgs, tools_prompt(all_schemas)) if all_schemas else [dict(m) for m in msgs]
        return chat.prepare(msgs, schemas, example_call=example_tool.example_call() if example_tool else None)

    parser_stop = tuple(s for s in member(parser, "parsers", "stop") if s not in sampling.stop)
    if parser_stop:
        sampling = attrs.evolve(sampling, stop=tuple(sampling.stop) + parser_stop)
    messages = prepare(trajectory.messages)
    trajectory.messages[:] = messages
    ctx.state.messages = [dict(m) for m in messages]
    recorder.state = ctx.state
    ctx.store.setdefault("_tool_timeout_s", cfg.tool_timeout_s)
    limit = int(cfg.max_context_tokens)
    engine_ctx = member(engine, "inference_engines", "max_context")
    if engine_ctx:
        limit = min(limit, int(engine_ctx))
    t0 = time.perf_counter()
    state = _LoopState(ids=await asyncio.to_thread(chat.start, ctx.state.messages, schemas))
    tokenize_s = time.perf_counter() - t0

    def finish(reason: str, error: str | None = None) -> None:
        trajectory.finish_reason = reason
        if error is not None:
            trajectory.error = error
        trajectory.masked = reason in MASKED_REASONS

    while True:
        if state.turn >= cfg.max_turns:
            finish(MAX_TURNS)
            break
        room = limit - len(state.ids)
        if room <= 0:
            finish(CONTEXT_EXCEEDED)
            break
        call_sampling = attrs.evolve(sampling, max_tokens=min(sampling.max_tokens, room))
        try:
            out = await asyncio.wait_for(recorder.generate(state.ids, call_sampling), engine_timeout_s)
        except asyncio.CancelledError:
            raise
        except (asyncio.TimeoutError, TimeoutError) as exc:  # EngineStalled names its bound and the queueing
            finish(TIMEOUT, str(exc) or f"engine call timed out after {engine_timeout_s:g} s (engine.call_timeout_s)")
            break
        except Exception as exc:  # an engine failure ends this trajectory only
            finish(ERROR_RUN, f"engine '{display_name(engine, 'inference_engines')}' failed: "
                              f"{type(exc).__name__}: {exc}")
            log.info("trajectory %s: %s", trajectory.id, trajectory.error)
            break
        state.turn += 1
        trajectory.turns = state.turn
        output_ids = list(out.output_ids)
        # formats whose call markers are special tokens (harmony, Kimi-K2, Mistral) are decoded with them kept
        text = chat.decode(output_ids, keep_special=bool(member(parser, "parsers", "keep_special_tokens")))
        assistant = {"role": "assistant", "content": text}
        trajectory.messages.append(assistant)
        ctx.state.messages.append(dict(assistant))
        if out.finish_reason == "abort":
            finish(ERROR_RUN, "the engine aborted the generation (finish_reason 'abort')")
            break
        if not output_ids and out.finish_reason != "length":
            finish(ERROR_RUN, f"the engine returned no tokens (finish_reason {out.finish_reason!r})")
            break
        if out.finish_reason == "length":
            if len(output_ids) >= sampling.max_tokens:
                finish(MAX_TOKENS, _max_tokens_error(_parse(parser, text, "length", all_schemas),
                                                     sampling.max_tokens))
            else:
                finish(CONTEXT_EXCEEDED, f"generation reached the context window of {limit} tokens")
            break

        parsed = _parse(parser, text, out.finish_reason, all_schemas)
        new: list[dict] = []
        done: ToolResult | None = None
        reset: list[dict] | None = None
        hints: list[str] = []
        obs_role = chat.observation_role
        unread = None if parsed.calls or parsed.errors else _unread_call(text, tools, parser)
        if unread is not None:  # call-shaped text the parser cannot read: say so, never a silent stop
            trajectory.metrics["unread_calls"] = trajectory.metrics.get("unread_calls", 0) + 1
            new.append({"role": obs_role, "content": unread})
        elif not parsed.calls and not parsed.errors:
            if cfg.on_no_tool_call == "stop" or state.nudges >= cfg.max_nudges:
                finish(NO_TOOL_CALL)
                break
            state.nudges += 1
            new.append({"role": "user", "content": _nudge(tools, parser)})
        for err in parsed.errors:
            new.append({"role": obs_role, "content": _unparseable(err, text, tools, parser)})
        lost: RuntimeLost | None = None
        for call in parsed.calls:
            try:
                result, content = await _execute(call, tools, ctx, cfg, parser, trajectory)
            except RuntimeLost as exc:  # the runtime itself died: this trajectory cannot go on
                lost = exc
                break
            observation = observation_message(obs_role, content, result.images if result else None, engine)
            observation["tool_call_id"] = call.id  # results are paired with calls by id, not by position
            new.append(observation)
            if result is None:
                continue
            if result.metadata.get("edit_failed") and cfg.hints.failed_edit:
                hints.append("The edit did not apply. View the file again to re-check its current content "
                             "before the next edit.")
            action = f"{call.name}:{json.dumps(call.arguments, sort_keys=True, default=str)}"
            state.repeats = state.repeats + 1 if action == state.last_action else 1
            state.last_action = action
            n_rep = cfg.hints.repeated_action
            if n_rep and state.repeats >= n_rep:
                hints.append(f"You have made the same call {state.repeats} times in a row with the same "
                             f"arguments; it will not give a different result. Try something else.")
            if result.finish:
                done = result
                break
            if result.reset_messages is not None:
                reset = [dict(m) for m in result.reset_messages]
                break
        if lost is not None:
            trajectory.messages.extend(new)
            finish(ERROR_RUNTIME, f"the runtime died: {lost}")
            log.info("trajectory %s: %s", trajectory.id, trajectory.error)
            break
        if done is not None:
            trajectory.answer = done.answer
            trajectory.messages.extend(new)
            ctx.state.messages.extend(dict(m) for m in new)
            finish(FINISHED)
            break

        left = cfg.max_turns - state.turn
        if cfg.hints.turns_left and left > 0:
            hints.append(f"{left} turn{'s' if left != 1 else ''} left.")
        if cfg.hints.context_almost_full and len(state.ids) >= cfg.hints.context_warn_fraction * limit:
            enders = [t.name for t in tools.values() if t.finishes]
            finish_hint = f" Call {enders[0]} with your answer soon." if enders else ""
            hints.append(f"The context is {100 * len(state.ids) / limit:.0f}% full.{finish_hint}")
        if reset is not None:
            trajectory.messages.extend(new)
            if hints and reset:
                reset[-1]["content"] = f"{reset[-1].get('content') or ''}\n\n[{' '.join(hints)}]"
            trajectory.messages.extend([{**m, "context_reset": True} if i == 0 else m for i, m in enumerate(reset)])
            ctx.state.messages = prepare(reset)
            recorder.new_context = True
            t0 = time.perf_counter()
            state.ids = await asyncio.to_thread(chat.start, ctx.state.messages, schemas)
            tokenize_s += time.perf_counter() - t0
            continue
        if hints and new:
            new[-1]["content"] = f"{new[-1]['content']}\n\n[{' '.join(hints)}]"
        t0 = time.perf_counter()
        if chat.needs_rerender(ctx.state.messages, new):
            # the template drops earlier thinking from here on: follow it, as a new training datum
            state.ids = chat.render_ids(ctx.state.messages + new, schemas)
            recorder.new_context = True
        else:
            state.ids = state.ids + output_ids + chat.continuation_ids(new, output_ids, schemas)
        tokenize_s += time.perf_counter() - t0
        trajectory.messages.extend(new)
        ctx.state.messages.extend(dict(m) for m in new)

    trajectory.metrics["tokenize_s"] = tokenize_s
    trajectory.metrics.setdefault("unread_calls", 0)  # replies shaped like a call the parser could not read
    check = member(chat, "chat_formats", "check_drift") if drift_check else None
    if check is not None:  # the chat format's re-render (the built-in: default_plugins/chat/drift.py)
        t0 = time.perf_counter()
        check(trajectory, ctx.state.messages, schemas)
        trajectory.metrics["retok_drift_s"] = time.perf_counter() - t0


async def _execute(call: ToolCall, tools: dict[str, Tool], ctx: ToolContext, cfg: Any, parser: Any,
                   trajectory: Trajectory) -> tuple[ToolResult | None, str]:
    """Run one call. Returns (result, observation text); result is None when the call was not run or failed
    (the observation is then a corrective message)."""
    tool = tools.get(call.name)
    if tool is None:
        names = ", ".join(sorted(tools))
        close = _closest(call.name, tools)
        hint = f" Did you mean '{close}'?" if close else ""
        example = _call_text(tools[close].example_call(), parser) if close else ""
        return None, (f"Error: there is no tool named '{call.name}'.{hint} Valid tools: {names}."
                      + (f" A valid call:\n{example}" if example else ""))
    trajectory.tool_calls[tool.name] = trajectory.tool_calls.get(tool.name, 0) + 1
    example = _call_text(tool.example_call(), parser)
    timeout = tool.timeout_s if tool.timeout_s is not None else cfg.tool_timeout_s
    try:
        tool.validate(call.arguments)
        result = await asyncio.wait_for(tool.call(call.arguments, ctx), timeout)
    except (asyncio.CancelledError, RuntimeLost):  # a lost runtime ends the trajectory (error_runtime)
        raise
    except ToolArgumentsError as exc:
        return None, f"Error: {exc}. A valid call of '{tool.name}' looks like:\n{example}"
    except (asyncio.TimeoutError, TimeoutError):
        return None, (f"Error: tool '{tool.name}' timed out after {timeout:g} s (agent.tool_timeout_s) and was "
                      f"stopped. Try a faster or smaller step.")
    except Exception as exc:  # a failing tool is an observation, never a crash
        log.info("trajectory %s: tool %s raised %s: %s", trajectory.id, tool.name, type(exc).__name__, exc)
        return None, (f"Error: tool '{tool.name}' failed: {type(exc).__name__}: {exc}. Check the arguments "
                      f"against its schema; a valid call looks like:\n{example}")
    output = result.output if isinstance(result.output, str) else str(result.output)
    output, cut = truncate_output(output, min(MAX_OBSERVATION_CHARS, int(cfg.max_context_tokens)))
    if cut:
        result.metadata["observation_truncated"] = True
    return result, output


def _parse(parser: Any, text: str, finish_reason: str, schemas: list[dict]) -> Any:
    """``parser.parse``; a parser that types values by schema (``needs_tool_schemas``: qwen3_coder, glm45) is given
    the trajectory's tools."""
    if member(parser, "parsers", "needs_tool_schemas"):
        return parser.parse(text, finish_reason, tool_schemas=schemas)
    return parser.parse(text, finish_reason)


def _max_tokens_error(cut: Any, max_tokens: int) -> str:
    """What a generation stopped by ``sampling.max_tokens`` left: a call cut off, complete calls, or none."""
    if cut.truncated:
        return f"generation hit sampling.max_tokens={max_tokens} mid-call (the cut-off call was not run)"
    if cut.calls:
        n = len(cut.calls)
        return (f"generation hit sampling.max_tokens={max_tokens} after {n} complete tool call{'s' if n != 1 else ''} "
                f"(not run: the reply was not finished)")
    return f"generation hit sampling.max_tokens={max_tokens} with no tool call in the text"


def _resembled(text: str, tools: dict[str, Tool], parser: Any) -> tuple[str, str, bool] | None:
    """(parser name, format name, whether ``parser`` reads that format: its ``reads_formats``) of the call format
    the reply resembles, or None: the process's format detector ``default`` (``register_format_detectors``; the
    built-in looks outside the reply's reasoning)."""
    found = get_registry().get("format_detectors", "default")(text, tools)
    if found is None:
        return None
    return found[0], found[1], found[0] in member(parser, "parsers", "reads_formats")


def _unread_call(text: str, tools: dict[str, Tool], parser: Any) -> str | None:
    """An observation for a reply that has the shape of a tool call (a known format's markers, or a JSON
    object naming a tool) from which ``parser`` read neither a call nor an error; None when it has no such
    shape. Names the format it resembles and shows a valid call in the parser's own format."""
    found = _resembled(text, tools, parser)
    if found is None:
        return None
    fmt_parser, label, readable = found
    mine = display_name(parser, "parsers")
    first = _preferred_example_tool(tools)
    example = _call_text(first.example_call(), parser) if first else ""
    if readable:
        head = f"Error: your reply looks like a tool call in the {label} format, but no call could be read from it"
    else:
        head = (f"Error: your reply looks like a tool call in the {label} format (parser '{fmt_parser}'), but "
                f"this run reads tool calls in the '{mine}' format")
    return head + ", so nothing was run." + (f" Write the call like this:\n{example}" if example else "")


def _unparseable(error: str, text: str, tools: dict[str, Tool], parser: Any) -> str:
    """Corrective text for a call the parser could not read: what was wrong and a valid call, taken from the
    tool the model seems to have meant (its name appears in the text), else the list of tools."""
    meant = [t for name, t in tools.items() if f'"{name}"' in text or f"'{name}'" in text]
    names = ", ".join(sorted(tools))
    msg = f"Error: your tool call could not be parsed: {error}."
    found = _resembled(text, tools, parser)
    if found is not None and not found[2]:
        msg += (f" Your reply looks like the {found[1]} format (parser '{found[0]}'); this run reads the "
                f"'{display_name(parser, 'parsers')}' format.")
    if meant:
        example = _call_text(meant[0].example_call(), parser)
        return msg + f" A valid call of '{meant[0].name}' looks like:\n{example}"
    first = _preferred_example_tool(tools)
    example = _call_text(first.example_call(), parser) if first else ""
    return msg + f" Valid tools: {names}." + (f" For example:\n{example}" if example else "")


def _nudge(tools: dict[str, Tool], parser: Any) -> str:
    first = _preferred_example_tool(tools)
    example = _call_text(first.example_call(), parser) if first else ""
    return NUDGE.format(names=", ".join(sorted(tools)), example=example)


def _preferred_example_tool(tools: dict[str, Tool]) -> Tool | None:
    """The tool used in generic examples: the first that does not end the trajectory (``Tool.finishes``), so the
    example shows a working step."""
    for tool in tools.values():
        if not tool.finishes:
            return tool
    return next(iter(tools.values()), None)


def _closest(name: str, tools: dict[str, Tool]) -> str | None:
    import difflib

    match = difflib.get_close_matches(str(name), list(tools), n=1, cutoff=0.6)
    return match[0] if match else None
