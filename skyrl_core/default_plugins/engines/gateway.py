"""The recording gateway (``skyrl serve --record``, or :class:`Gateway` in-process): an OpenAI-compatible
``chat/completions`` endpoint in front of any engine that records every call as a
:class:`~skyrl_core.transitions.Transition` with the engine's exact token ids and logprobs, so an agent harness
that only speaks OpenAI (mini-swe-agent, a LangGraph graph, a verifiers environment) can be trained unmodified.

Sessions. Each request belongs to a session (one trajectory), named by the path
(``/sessions/<id>/v1/chat/completions``), an ``X-Session-Id`` header or the request's ``user`` field, in that
order. A request naming no session is refused (400 ``no_session``). An unknown id opens a session on first use,
unless the gateway was built with ``require_open=True`` (``--require-open``; a task that opens its sessions
itself uses it): then the session must be opened first (``POST /sessions`` or :meth:`Gateway.open`) and an
unknown id answers 404 ``unknown_session``. ``POST /sessions/<id>/end`` (or :meth:`Gateway.end`) ends it: later
requests answer 409 ``session_ended``. ``GET /sessions/<id>`` returns its transitions and metrics;
:meth:`Gateway.trajectory` builds the :class:`~skyrl_core.transitions.Trajectory` postprocess packs.

Token-in/token-out. The gateway renders messages with the agent loop's :class:`~skyrl_core.default_plugins.chat.template.ChatFormat`
(tools described the same way, tool messages in the template's observation role). When a request's messages
are the previous request's messages, then the assistant reply the gateway gave (compared message by message:
role, content, tool calls by id, name and parsed arguments), then new messages, only the new messages are
tokenised (:meth:`ChatFormat.continuation_ids`) and appended to the previous call's input + output ids: the
transition's input extends the previous one and postprocess packs both into one datum. Otherwise (the harness
rewrote or summarised its history, changed the tools, or sent back a reply other than the one it got) the whole
conversation is rendered once and the transition starts a new datum (``new_context``); the session's metrics
count it (``drift``) with the first differing message and token (``drift_events``). A conversation is never
silently re-tokenised in place.

Tool calls. The configured parser reads the model's text; calls come back in OpenAI form (``tool_calls`` with
ids, ``finish_reason: tool_calls``); text the parser could not read comes back as plain content and the error
is counted (``parse_errors``). ``tool_choice: none`` returns plain content; ``required`` or a named function
cannot be enforced on free decoding: a reply without the call is counted (``tool_choice_unmet``).

Bad input, each a JSON error ``{"error": {"message", "type", "code"}}`` and a gateway counter
(:attr:`Gateway.counters`): 400 ``bad_request`` / ``no_session`` / ``context_exceeded``, 401 ``unauthorized``,
404 ``unknown_session``, 409 ``session_ended``, 409 ``session_busy`` (a second request on a session while one is
in flight: a trajectory is a sequence, so concurrent calls on one session are refused, not queued in an
arbitrary order), 413 ``request_too_large`` (the body exceeds ``max_request_bytes``, named in the message), 502
``engine_error`` (the engine failed; nothing of that request is recorded and the session is as before, so the
client may retry).

Binding: 127.0.0.1 by default; on any other interface a token is required (``--token`` or
``SKYRL_GATEWAY_TOKEN``) and every request but ``/health`` must carry ``Authorization: Bearer <token>``
(compared in constant time).
"""

# No ``from __future__ import annotations``: FastAPI reads the endpoints' ``Request`` annotations at runtime.
import asyncio
import hmac
import ipaddress
import json
import logging
import re
import socket
import time
import uuid
from typing import Any

import attrs

from skyrl_core.agent import _render_demonstrations, with_system_text
from skyrl_core.default_plugins.chat.template import ChatFormat
from skyrl_core.default_plugins.chat.drift import token_drift
from skyrl_core.contracts import member
from skyrl_core.inference.base import SamplingParams
from skyrl_core.transitions import Trajectory, Transition

from .serve import BadRequest, _cut_stop, _sampling

log = logging.getLogger(__name__)

_SESSION_ID = re.compile(r"[A-Za-z0-9._-]{1,128}")

MAX_REQUEST_BYTES = 2 * 1024 * 1024  # a request body above this is refused with 413
COUNTERS = ("requests", "bad_request", "no_session", "context_exceeded", "unauthorized", "unknown_session",
            "session_ended", "session_busy", "request_too_large", "engine_error")


class GatewayError(Exception):
    """A refused request: HTTP ``status``, a named ``code`` (also the counter it increments) and a message."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code = status, code


def _norm_call(call: Any) -> Any:
    if not isinstance(call, dict):
        return call
    fn = call.get("function") or {}
    args = fn.get("arguments")
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            pass
    return {"id": call.get("id"), "name": fn.get("name"), "arguments": args}


def content_text(content: Any) -> str:
    """A message's content as the text the chat template renders: a string as is; OpenAI content parts joined
    by newlines, each ``text`` part's text and, for an ``image_url`` part, a stand-in naming its size (the engine
    behind the gateway is text-only: skyrl_core/multimodal.py). Raises GatewayError (400) naming any other part."""
    if not isinstance(content, list):
        return content or ""
    from skyrl_core.multimodal import part_png, png_size

    texts = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else type(part).__name__
        if kind == "text":
            texts.append(str(part.get("text") or ""))
        elif kind == "image_url":
            try:
                size = "%dx%d " % png_size(part_png(part))
            except ValueError:
                size = ""
            texts.append(f"[image {size}omitted: the gateway's engine is text-only]")
        else:
            raise GatewayError(400, "bad_request", f"unsupported content part {kind!r}; valid: text, image_url")
    return "\n".join(texts)


def normalize(message: dict) -> dict:
    """The fields of a chat message that decide its rendering, in one canonical form (content None and "" are
    the same; content parts as :func:`content_text`; tool-call arguments compared as parsed JSON; client-only
    fields such as ``refusal`` dropped)."""
    out = {"role": message.get("role"), "content": content_text(message.get("content"))}
    if message.get("tool_calls"):
        out["tool_calls"] = [_norm_call(c) for c in message["tool_calls"]]
    for key in ("tool_call_id", "name"):
        if message.get(key) is not None:
            out[key] = message[key]
    return out


@attrs.define
class Session:
    """One trajectory's calls. ``transitions`` as recorded; ``metrics``: ``calls``, ``extended`` (calls whose input
    extends the previous call's), ``drift`` (calls that started a new datum after the first), ``drift_events``
    (``{"call", "first_message", "first_token", "reason"}`` per drift: indexes of the first differing message of
    the request and the first differing token against the previous call's input + output; ``reason`` is
    ``history_changed``, ``tools_changed`` or ``template_drops_thinking``), ``parse_errors``, ``tool_calls``,
    ``tool_choice_unmet``, ``engine_errors``, ``busy_rejections``, ``replays`` (requests repeating the previous
    one exactly, as a client does that retries after losing an answer: the previous request's transitions are
    replaced by the new ones, never kept twice)."""

    id: str
    transitions: list[Transition] = attrs.Factory(list)
    metrics: dict[str, Any] = attrs.Factory(lambda: {
        "calls": 0, "extended": 0, "drift": 0, "drift_events": [], "parse_errors": 0, "tool_calls": 0,
        "tool_choice_unmet": 0, "engine_errors": 0, "busy_rejections": 0, "replays": 0})
    messages: list[dict] = attrs.Factory(list)  # the last request's messages, normalised
    replies: list[tuple[dict, int]] = attrs.Factory(list)  # (normalised reply, transition index) per choice
    tools: list = attrs.Factory(list)
    ended: bool = False
    busy: bool = False

    def to_json(self) -> dict:
        return {"id": self.id, "ended": self.ended, "metrics": self.metrics,
                "transitions": [t.to_json() for t in self.transitions]}


def stream_events(response: dict[str, Any], usage: bool) -> list[dict[str, Any]]:
    """A finished chat.completion as the OpenAI stream's chunks (``stream: true``): per choice one delta with the
    whole message (its tool calls indexed) and one with the finish reason, then the usage chunk when asked
    (``stream_options.include_usage``). The call is generated and recorded whole before the first byte is sent."""
    head = {k: response[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    events = []
    for choice in response["choices"]:
        message = choice["message"]
        delta: dict[str, Any] = {"role": "assistant", "content": message.get("content")}
        if message.get("tool_calls"):
            delta["tool_calls"] = [{"index": k, **call} for k, call in enumerate(message["tool_calls"])]
        events.append({**head, "choices": [{"index": choice["index"], "delta": delta,
                                            "logprobs": choice.get("logprobs"), "finish_reason": None}]})
        events.append({**head, "choices": [{"index": choice["index"], "delta": {},
                                            "finish_reason": choice["finish_reason"]}]})
    if usage:
        events.append({**head, "choices": [], "usage": response["usage"]})
    return events


class Gateway:
    """The recording gateway around ``engine`` (any registered engine: ``generate(ids, sampling)``, a
    ``tokenizer`` unless ``chat_format`` is given, optionally ``max_context``).

    ``chat_format``: the :class:`ChatFormat` the agent loop would use (default: built from the engine's
    tokenizer); ``parser``: a registered tool-call parser object (default: ``hermes``); ``served_name``: the
    model name clients send (any name is accepted when None); ``require_open``: sessions must be opened before
    use; ``max_request_bytes``: request body bound (413 above it); ``token``: required bearer token (None: no
    auth; binding a non-loopback host without one raises ValueError).
    """

    def __init__(self, engine: Any, chat_format: ChatFormat | None = None, parser: Any = None, *,
                 served_name: str | None = None, require_open: bool = False,
                 max_request_bytes: int = MAX_REQUEST_BYTES, token: str | None = None) -> None:
        if parser is None:
            from skyrl_core.default_plugins.parsers import HermesParser

            parser = HermesParser()
        self.engine = engine
        self.chat = chat_format or ChatFormat(engine.tokenizer)
        self.parser = parser
        self.served_name = served_name
        self.require_open = require_open
        self.max_request_bytes = int(max_request_bytes)
        self.token = token
        self.sessions: dict[str, Session] = {}
        self.counters: dict[str, int] = dict.fromkeys(COUNTERS, 0)
        self._server: Any = None
        self._task: asyncio.Task | None = None
        self.url: str | None = None
        self.app = self._build_app()

    # -- the in-process API ----------------------------------------------------------------------------------
    def open(self, session_id: str | None = None) -> str:
        """Open a session (a fresh id when None) and return its id; ValueError if it exists or is not made of
        letters, digits, ``.``, ``_`` and ``-`` (it is a URL path segment)."""
        sid = session_id or uuid.uuid4().hex
        if not _SESSION_ID.fullmatch(sid):
            raise ValueError(f"session id {sid!r} must be 1-128 letters, digits, '.', '_' or '-'")
        if sid in self.sessions:
            raise ValueError(f"session '{sid}' is already open")
        self.sessions[sid] = Session(sid)
        return sid

    def end(self, session_id: str) -> Session:
        """End a session (later requests answer 409 ``session_ended``) and return it; KeyError if unknown."""
        session = self.sessions[session_id]
        session.ended = True
        return session

    def base_url(self, session_id: str) -> str:
        """The OpenAI base URL of a session (``OPENAI_BASE_URL`` for a harness); the gateway must be started."""
        if self.url is None:
            raise RuntimeError("the gateway is not serving; call start() first")
        return f"{self.url}/sessions/{session_id}/v1"

    def trajectory(self, session_id: str, task: str = "gateway", instance_id: str | None = None,
                   sample_index: int = 0, group_id: str | None = None) -> Trajectory:
        """A Trajectory holding the session's transitions (a copy of the list) and metrics (``gateway_*``)."""
        s = self.sessions[session_id]
        traj = Trajectory(instance_id=instance_id or session_id, sample_index=sample_index, task=task,
                          group_id=group_id or session_id, transitions=list(s.transitions))
        traj.turns = len(s.transitions)
        traj.metrics.update({f"gateway_{k}": v for k, v in s.metrics.items()})
        return traj

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Serve on ``host:port`` (0: a free port) from the running event loop; returns ``http://host:port``.
        ValueError when ``host`` is not a loopback address and no token is set."""
        import uvicorn

        sock = bind(host, port, self.token)
        self._server = uvicorn.Server(uvicorn.Config(self.app, log_level="warning", access_log=False))
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]))
        while not self._server.started:
            if self._task.done():
                self._task.result()
            await asyncio.sleep(0.01)
        self.url = f"http://{host}:{sock.getsockname()[1]}"
        return self.url

    async def stop(self) -> None:
        """Stop serving (sessions stay readable)."""
        if self._server is not None:
            self._server.should_exit = True
            await self._task
            self._server = self._task = None

    # -- recording -----------------------------------------------------------------------------------------
    def _session_for(self, sid: str | None) -> Session:
        if not sid:
            raise GatewayError(400, "no_session", "name a session: POST /sessions/<id>/v1/chat/completions, an "
                                                  "'X-Session-Id' header, or the 'user' field")
        session = self.sessions.get(sid)
        if session is None:
            if not _SESSION_ID.fullmatch(sid):
                raise GatewayError(400, "bad_request", f"session id {sid[:200]!r} must be 1-128 letters, digits, "
                                                       "'.', '_' or '-'")
            if self.require_open:
                raise GatewayError(404, "unknown_session", f"session '{sid}' is not open; this gateway requires "
                                                           "sessions to be opened first (POST /sessions)")
            session = self.sessions[sid] = Session(sid)
        if session.ended:
            raise GatewayError(409, "session_ended", f"session '{sid}' has ended; open a new session")
        if session.busy:
            session.metrics["busy_rejections"] += 1
            raise GatewayError(409, "session_busy", f"session '{sid}' already has a request in flight; a session "
                                                    "is one trajectory: send its requests one at a time")
        return session

    def _schemas(self, tools: list) -> list:
        """The tool schemas the template renders: none for a parser that describes the tools itself."""
        return [] if member(self.parser, "parsers", "tools_prompt") is not None else tools

    def _prepare(self, messages: list[dict], tools: list) -> tuple[list[dict], list]:
        """The agent loop's preparation: demonstrated tool calls written the parser's way, the tools described
        where the template does not render them. -> (messages, schemas for the template)."""
        tools_prompt = member(self.parser, "parsers", "tools_prompt")
        schemas = self._schemas(tools)
        native = bool(schemas) and self.chat.tools_in_template
        msgs = _render_demonstrations(messages, self.parser, self.chat, native_tools=native)
        if tools_prompt is not None:
            return (with_system_text(msgs, tools_prompt(tools)) if tools else msgs), schemas
        return self.chat.prepare(msgs, schemas), schemas

    def _prompt_ids(self, session: Session, messages: list[dict], tools: list) -> tuple[list[int], bool, bool]:
        """-> (input ids, new_context, replay). Extends the previous call's ids when ``messages`` continue it;
        ``replay``: the request repeats the previous one exactly (its ids are reused)."""
        norm = [normalize(m) for m in messages]
        prev = session.messages
        if session.replies and tools == session.tools and norm == prev:
            last = session.transitions[session.replies[0][1]]
            return list(last.input_ids), last.new_context, True
        reason = "history_changed" if tools == session.tools else "tools_changed"
        if session.transitions and tools == session.tools and len(norm) > len(prev) and norm[:len(prev)] == prev:
            for reply, index in session.replies:
                if norm[len(prev)] != reply:
                    continue
                if self.chat.needs_rerender(norm[:len(prev) + 1], norm[len(prev) + 1:]):
                    reason = "template_drops_thinking"  # the template would drop earlier <think> blocks: follow it
                    break
                last = session.transitions[index]
                schemas = self._schemas(tools)
                suffix = _render_demonstrations(messages[len(prev) + 1:], self.parser, self.chat,
                                                native_tools=bool(schemas) and self.chat.tools_in_template)
                cont = self.chat.continuation_ids(suffix, last.output_ids, schemas)
                session.metrics["extended"] += 1
                return list(last.input_ids) + list(last.output_ids) + cont, False, False
        prepared, schemas = self._prepare(messages, tools)
        ids = self.chat.start(prepared, schemas)
        if not session.transitions:
            return ids, False, False
        expected = prev + [session.replies[0][0]] if session.replies else prev
        first_message = next((i for i, (a, b) in enumerate(zip(norm, expected)) if a != b),
                             min(len(norm), len(expected)))
        last = session.transitions[session.replies[0][1] if session.replies else -1]
        drift = token_drift(list(last.input_ids) + list(last.output_ids), ids)
        first_token = drift.first if drift.tokens else min(len(ids), len(last.input_ids) + len(last.output_ids))
        session.metrics["drift"] += 1
        session.metrics["drift_events"].append({"call": len(session.transitions), "first_message": first_message,
                                                "first_token": first_token, "reason": reason})
        return ids, True, False

    def _reply(self, session: Session, out: Any, sp: SamplingParams, tools: list, tool_choice: Any) -> tuple[dict, str]:
        text = self.chat.decode(out.output_ids, keep_special=bool(member(self.parser, "parsers",
                                                                         "keep_special_tokens")))
        text = _cut_stop(text, sp.stop)
        message: dict[str, Any] = {"role": "assistant", "content": text}
        finish = out.finish_reason
        if tools and tool_choice != "none":
            if member(self.parser, "parsers", "needs_tool_schemas"):
                parsed = self.parser.parse(text, out.finish_reason, tool_schemas=tools)
            else:
                parsed = self.parser.parse(text, out.finish_reason)
            if parsed.calls:
                message["content"] = parsed.content or None
                message["tool_calls"] = [{"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
                                          "function": {"name": c.name,
                                                       "arguments": json.dumps(c.arguments, ensure_ascii=False)}}
                                         for c in parsed.calls]
                session.metrics["tool_calls"] += len(parsed.calls)
                finish = "tool_calls" if out.finish_reason == "stop" else finish
            else:
                session.metrics["parse_errors"] += len(parsed.errors)
                if tool_choice == "required" or isinstance(tool_choice, dict):
                    session.metrics["tool_choice_unmet"] += 1
        return message, finish

    async def complete(self, session_id: str | None, body: dict[str, Any]) -> dict[str, Any]:
        """Answer one chat-completions request ``body`` on a session and record it. Raises GatewayError."""
        session = self._session_for(session_id)
        session.busy = True
        try:
            return await self._complete(session, body)
        finally:
            session.busy = False

    async def _complete(self, session: Session, body: dict[str, Any]) -> dict[str, Any]:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not all(
                isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages):
            raise GatewayError(400, "bad_request", "'messages' must be a non-empty list of {role, content} objects")
        # content parts (text, images) reach the chat template as text: a template concatenates strings
        messages = [{**m, "content": content_text(m["content"])} if isinstance(m.get("content"), list) else m
                    for m in messages]
        tools = body.get("tools") or []
        if not isinstance(tools, list):
            raise GatewayError(400, "bad_request", "'tools' must be a list of OpenAI function tools")
        tool_choice = body.get("tool_choice", "auto")
        try:
            sp = _sampling(body, 512)
            n = int(body.get("n") or 1)
        except (BadRequest, TypeError, ValueError) as exc:
            raise GatewayError(400, "bad_request", str(exc)) from None
        if not 1 <= n <= 16:
            raise GatewayError(400, "bad_request", f"'n' must be between 1 and 16, got {n}")
        parser_stop = tuple(s for s in member(self.parser, "parsers", "stop") if s not in sp.stop)
        if parser_stop:
            sp = attrs.evolve(sp, stop=tuple(sp.stop) + parser_stop)
        before = session.metrics["drift"], session.metrics["extended"], len(session.metrics["drift_events"])
        try:
            ids, new_context, replay = await asyncio.to_thread(self._prompt_ids, session, messages, tools)
        except ValueError as exc:  # a demonstrated call without a name, a template that cannot render
            raise GatewayError(400, "bad_request", f"could not render 'messages': {exc}") from None
        limit = member(self.engine, "inference_engines", "max_context")
        if limit:
            room = int(limit) - len(ids)
            if room <= 0:
                self._undo(session, before)
                raise GatewayError(400, "context_exceeded", f"the prompt is {len(ids)} tokens; the engine's "
                                                            f"context window is {limit}")
            sp = attrs.evolve(sp, max_tokens=min(sp.max_tokens, room))
        start = time.perf_counter()
        try:
            outs = await asyncio.gather(*[self.engine.generate(ids, sp) for _ in range(n)])
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # nothing of this request is recorded: the session stays as it was
            self._undo(session, before)
            session.metrics["engine_errors"] += 1
            raise GatewayError(502, "engine_error", f"the engine failed: {type(exc).__name__}: {exc}") from None
        latency = time.perf_counter() - start
        choices, replies = [], []
        for i, out in enumerate(outs):
            if out is None or getattr(out, "output_ids", None) is None:
                self._undo(session, before)
                raise GatewayError(502, "engine_error", f"the engine returned no output ({out!r})")
        if replay:  # a client retrying a request whose answer it lost: the unanswered calls are replaced
            del session.transitions[session.replies[0][1]:]
            session.metrics["replays"] += 1
        for i, out in enumerate(outs):
            session.transitions.append(Transition(
                input_ids=list(ids), output_ids=list(out.output_ids),
                output_logprobs=None if out.output_logprobs is None else [float(x) for x in out.output_logprobs],
                finish_reason=out.finish_reason, latency_s=latency, new_context=new_context,
                chat_template_kwargs=dict(self.chat.template_kwargs)))
            session.metrics["calls"] += 1
            message, finish = self._reply(session, out, sp, tools, tool_choice)
            replies.append((normalize(message), len(session.transitions) - 1))
            choice: dict[str, Any] = {"index": i, "message": message, "finish_reason": finish, "logprobs": None}
            if body.get("logprobs") and out.output_logprobs is not None:
                tok = self.chat.tokenizer
                choice["logprobs"] = {"content": [
                    {"token": tok.decode([t]), "logprob": float(lp), "bytes": list(tok.decode([t]).encode()),
                     "top_logprobs": []} for t, lp in zip(out.output_ids, out.output_logprobs)]}
            if body.get("return_token_ids"):
                choice["token_ids"] = list(out.output_ids)
            choices.append(choice)
        session.messages = [normalize(m) for m in messages]
        session.replies = replies
        session.tools = tools
        n_out = sum(len(o.output_ids) for o in outs)
        response: dict[str, Any] = {
            "id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model") or self.served_name or "skyrl", "choices": choices,
            "usage": {"prompt_tokens": len(ids), "completion_tokens": n_out, "total_tokens": len(ids) + n_out},
            "skyrl": {"session": session.id, "new_context": new_context}}
        if body.get("return_token_ids"):
            response["prompt_token_ids"] = ids
        return response

    @staticmethod
    def _undo(session: Session, before: tuple[int, int, int]) -> None:
        """Forget a refused request's drift/extension counts (its call was never made)."""
        session.metrics["drift"], session.metrics["extended"], n_events = before
        del session.metrics["drift_events"][n_events:]

    # -- HTTP ----------------------------------------------------------------------------------------------
    def _build_app(self):
        from fastapi import FastAPI, Request
        from fastapi.responses import JSONResponse

        app = FastAPI(title="skyrl recording gateway", docs_url=None, redoc_url=None)
        gw = self

        def error(status: int, code: str, message: str) -> JSONResponse:
            gw.counters[code] = gw.counters.get(code, 0) + 1
            return JSONResponse(status_code=status, content={"error": {"message": message, "type": code,
                                                                       "code": status}})

        @app.middleware("http")
        async def guard(request: Request, call_next):
            if gw.token and request.url.path != "/health":
                given = request.headers.get("authorization", "")
                if not hmac.compare_digest(given.encode(), f"Bearer {gw.token}".encode()):
                    return error(401, "unauthorized", "missing or wrong 'Authorization: Bearer <token>' header")
            length = request.headers.get("content-length")
            if length and length.isdigit() and int(length) > gw.max_request_bytes:
                return error(413, "request_too_large", f"the request body is {int(length)} bytes; the limit is "
                                                       f"{gw.max_request_bytes} bytes (max_request_bytes)")
            return await call_next(request)

        @app.exception_handler(GatewayError)
        async def refused(request: Request, exc: GatewayError):
            return error(exc.status, exc.code, str(exc))

        async def body_of(request: Request) -> dict[str, Any]:
            raw = bytearray()
            async for chunk in request.stream():  # bounded even without a Content-Length header
                raw += chunk
                if len(raw) > gw.max_request_bytes:
                    raise GatewayError(413, "request_too_large", f"the request body exceeds the limit of "
                                                                 f"{gw.max_request_bytes} bytes (max_request_bytes)")
            try:
                body = json.loads(bytes(raw) or b"{}")
            except json.JSONDecodeError:
                raise GatewayError(400, "bad_request", "request body is not valid JSON") from None
            if not isinstance(body, dict):
                raise GatewayError(400, "bad_request", "request body must be a JSON object")
            model = body.get("model")
            if gw.served_name and model is not None and model != gw.served_name:
                raise GatewayError(400, "bad_request", f"model '{model}' is not served here; this gateway serves "
                                                       f"'{gw.served_name}'")
            return body

        async def chat(sid: str | None, body: dict[str, Any]):
            gw.counters["requests"] += 1
            response = await gw.complete(sid, body)
            if not body.get("stream"):
                return response
            from fastapi.responses import StreamingResponse

            usage = isinstance(body.get("stream_options"), dict) and body["stream_options"].get("include_usage")
            events = [f"data: {json.dumps(e)}\n\n" for e in stream_events(response, bool(usage))]
            return StreamingResponse(iter(events + ["data: [DONE]\n\n"]), media_type="text/event-stream")

        @app.get("/health")
        async def health():
            return {"status": "ok", "sessions": len(gw.sessions)}

        @app.get("/metrics")
        async def metrics():
            return gw.counters

        @app.get("/v1/models")
        @app.get("/sessions/{sid}/v1/models")
        async def models(sid: str | None = None):
            name = gw.served_name or "skyrl"
            return {"object": "list", "data": [{"id": name, "object": "model", "owned_by": "skyrl"}]}

        @app.post("/v1/chat/completions")
        async def chat_completions(request: Request):
            body = await body_of(request)
            user = body.get("user") if isinstance(body.get("user"), str) else None
            return await chat(request.headers.get("x-session-id") or user, body)

        @app.post("/sessions/{sid}/v1/chat/completions")
        async def session_chat_completions(sid: str, request: Request):
            return await chat(sid, await body_of(request))

        @app.post("/sessions")
        async def open_session(request: Request):
            body = await body_of(request)
            sid = body.get("id")
            if sid is not None and sid in gw.sessions:
                raise GatewayError(409, "bad_request", f"session '{sid}' is already open")
            try:
                sid = gw.open(None if sid is None else str(sid))
            except ValueError as exc:
                raise GatewayError(400, "bad_request", str(exc)) from None
            return {"id": sid, "base_url": f"{str(request.base_url).rstrip('/')}/sessions/{sid}/v1"}

        def known(sid: str) -> Session:
            if sid not in gw.sessions:
                raise GatewayError(404, "unknown_session", f"no session '{sid}'")
            return gw.sessions[sid]

        @app.get("/sessions/{sid}")
        async def get_session(sid: str):
            return known(sid).to_json()

        @app.post("/sessions/{sid}/end")
        async def end_session(sid: str):
            known(sid)
            return gw.end(sid).to_json()

        return app


def bind(host: str, port: int, token: str | None) -> socket.socket:
    """A bound TCP socket on ``host:port``; ValueError for a non-loopback ``host`` without a token."""
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback and not token:
        raise ValueError(f"the gateway binds {host!r}, which is not a loopback address: set a token (--token or "
                         "SKYRL_GATEWAY_TOKEN) so only clients holding it can record into sessions")
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    return sock
