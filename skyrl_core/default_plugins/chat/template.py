"""Token-in/token-out chat formatting, the built-in chat format ``default`` (``register_chat_formats``; contract
:class:`skyrl_core.contracts.ChatFormat`): the model's chat template applied once, then extended by token ids.

The agent loop never decodes and re-encodes a conversation. :meth:`ChatFormat.start` renders the initial
messages with the tokenizer's chat template (passing ``tools=`` when the template renders them; otherwise the
tool schemas go into the system prompt in a Hermes-style ``<tools>`` block). After each generation,
:meth:`ChatFormat.continuation_ids` tokenises only the new messages (observations, hints) exactly as the
template would render them after an assistant turn, and the loop appends those ids to the prompt + generated
ids. Generated ids are kept as generated, including the end-of-turn token; when a generation stopped without
one (max tokens, a stop string) the template's end-of-turn text is added as environment tokens.

How a continuation is found without re-rendering the history: the template is rendered on a short probe
conversation ``[user, assistant=SENTINEL, *new_messages]`` and everything after the sentinel is the text the
template puts after an assistant's content: its end-of-turn suffix, the new messages and the next generation
prompt. The cost is constant per turn, so tokenisation grows linearly with the conversation
(tests/benchmarks/bench_tokenization.py).

Prefix preservation: ChatML (SmolLM2), Llama 3.1 and Qwen3 templates render a conversation as the
concatenation of these pieces (tests/test_chat.py proves it token for token), with one exception: Qwen3 drops
earlier turns' ``<think>`` blocks once a new *user* message follows them. With ``keep_thinking=False`` (the
default) the loop then re-renders the whole conversation with the template and starts a new training datum;
with ``keep_thinking=True`` it keeps the thinking tokens the model saw (one datum, but the context differs
from what the template would render).
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any, Sequence

from skyrl_core.agent import with_system_text

log = logging.getLogger(__name__)

SENTINEL = "SKYRLSENTINELa7f3"
_MARK_PREFIX = "SKYRLPLAINTEXT"
_PROBE_TOOL = {"type": "function", "function": {"name": "skyrl_probe_tool_q9", "description": "probe",
                                                 "parameters": {"type": "object", "properties": {}}}}


def tools_block(tool_schemas: Sequence[dict], example_call: str | None = None) -> str:
    """The Hermes-style system-prompt text describing ``tool_schemas`` (OpenAI function schemas) for templates
    that do not render ``tools=`` themselves. ``example_call`` is a JSON call shown as the answer format."""
    lines = [json.dumps(s, ensure_ascii=False) for s in tool_schemas]
    text = ("# Tools\n\nYou can call the following tools. Their signatures, as JSON Schema, are inside "
            "<tools></tools>:\n<tools>\n" + "\n".join(lines) + "\n</tools>\n\n"
            "To call a tool, reply with a JSON object holding the tool's name and its arguments inside "
            "<tool_call></tool_call> tags")
    if example_call:
        text += f", for example:\n<tool_call>\n{example_call}\n</tool_call>"
    else:
        text += ":\n<tool_call>\n{\"name\": <tool name>, \"arguments\": <arguments object>}\n</tool_call>"
    return text


class ChatFormat:
    """A tokenizer's chat template, probed once, applied incrementally.

    ``tokenizer`` is a transformers tokenizer; ``chat_template`` overrides its template (a jinja string);
    ``keep_thinking`` keeps earlier ``<think>`` blocks in the context where the template would drop them;
    ``template_kwargs`` are extra template variables passed to every render, probes included (Qwen3's
    ``enable_thinking``, Llama 3.1's ``date_string``; config ``agent.chat_template_kwargs``).

    Attributes found by rendering probes: ``tools_in_template`` (the template renders ``tools=``),
    ``observation_role`` (``tool``, or ``user`` where the template rejects a tool role), ``call_ids``
    (``rendered`` / ``ignored`` / ``rejected``: what the template does with an observation's
    ``tool_call_id``), ``drops_thinking``
    (the template drops earlier turns' thinking after a new user message), ``keeps_generation_prompt`` (False
    when earlier turns are rendered without text the generation prompt adds, as Qwen3's empty think block under
    ``enable_thinking=False``: the loop keeps that text, as the model saw it, in one datum).
    """

    def __init__(self, tokenizer: Any, chat_template: str | None = None, keep_thinking: bool = False,
                 template_kwargs: dict[str, Any] | None = None) -> None:
        self.tokenizer = tokenizer
        self.chat_template = chat_template
        self.keep_thinking = keep_thinking
        reserved = {"tokenize", "add_generation_prompt", "chat_template", "tools", "conversation"} & set(
            template_kwargs or {})
        if reserved:
            raise ValueError(f"chat_template_kwargs may not set {sorted(reserved)}: the agent loop sets them; "
                             f"give only template variables such as enable_thinking or date_string")
        self.template_kwargs = dict(template_kwargs or {})
        self._added_ids = {int(i) for i in getattr(tokenizer, "added_tokens_decoder", {}) or {}}
        self._added_ids |= {int(i) for i in (getattr(tokenizer, "all_special_ids", None) or [])}
        self._token_text: dict[int, str] = {}
        self._special_texts: list[str] | None = None
        self.tools_in_template = self._probe_tools()
        self.observation_role = self._probe_tool_role()
        self.call_ids = self._probe_call_ids()
        self.drops_thinking = self._probe_drops_thinking()
        self.keeps_generation_prompt = self._probe_keeps_generation_prompt()
        if not self.keeps_generation_prompt:
            log.info("the chat template (with %s) renders earlier assistant turns without the text its generation "
                     "prompt adds; the context keeps that text as the model saw it",
                     self.template_kwargs or "no kwargs")

    # -- rendering ---------------------------------------------------------------------------------------
    def render(self, messages: Sequence[dict], tools: Sequence[dict] | None = None,
               add_generation_prompt: bool = True) -> str:
        """The template's text for ``messages`` (``tools`` passed only where the template renders them)."""
        if getattr(self, "call_ids", "rendered") == "rejected":  # the template raises on ids it did not issue
            messages = [{k: v for k, v in m.items() if k != "tool_call_id"} for m in messages]
        kwargs: dict[str, Any] = {**self.template_kwargs, "tokenize": False,
                                  "add_generation_prompt": add_generation_prompt}
        if self.chat_template is not None:
            kwargs["chat_template"] = self.chat_template
        if tools and getattr(self, "tools_in_template", True):
            kwargs["tools"] = list(tools)
        return self.tokenizer.apply_chat_template(list(messages), **kwargs)

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` with no BOS/EOS added (the template writes its own special tokens)."""
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids: Sequence[int], keep_special: bool = False) -> str:
        """Text of generated ids without special tokens (what the parser and the transcript see).
        ``keep_special`` keeps them (formats whose call markers are special tokens: harmony, Kimi-K2, Mistral),
        less one special token at the end (the end of turn or of sequence the generation stopped on: the
        template writes its own)."""
        ids = list(ids)
        if not keep_special:
            return self.tokenizer.decode(ids, skip_special_tokens=True)
        if ids and int(ids[-1]) in self._special_ids():
            ids.pop()
        return self.tokenizer.decode(ids, skip_special_tokens=False)

    def render_ids(self, messages: Sequence[dict], tools: Sequence[dict] | None = None,
                   add_generation_prompt: bool = True) -> list[int]:
        """The whole conversation rendered by the template and tokenised: ids [prompt_len]. O(conversation).
        Non-assistant text holding a special token's text is tokenised as plain text (:meth:`encode_plain`)."""
        text, slots = self._render_with_plain_slots(
            messages, lambda msgs: self.render(msgs, tools, add_generation_prompt))
        return self._encode_marked(text, slots)

    # -- the incremental path ----------------------------------------------------------------------------
    def prepare(self, messages: Sequence[dict], tool_schemas: Sequence[dict],
                example_call: str | None = None) -> list[dict]:
        """The initial messages, with the tools block added to the system prompt where the template does not
        render ``tools=`` itself (a system message is inserted when there is none)."""
        if not tool_schemas or self.tools_in_template:
            return [dict(m) for m in messages]
        return with_system_text(messages, tools_block(tool_schemas, example_call))

    def start(self, messages: Sequence[dict], tool_schemas: Sequence[dict] = ()) -> list[int]:
        """Ids [prompt_len] of the prepared initial ``messages`` plus the generation prompt (rendered once)."""
        return self.render_ids(messages, tool_schemas, add_generation_prompt=True)

    def continuation_ids(self, new_messages: Sequence[dict], last_output_ids: Sequence[int],
                         tool_schemas: Sequence[dict] = ()) -> list[int]:
        """Environment ids to append after a generation: the rest of the assistant turn's end-of-turn text
        (all of it when the generation did not end with the end-of-turn token), ``new_messages`` as the
        template renders them after an assistant turn, and the next generation prompt. Cost is independent
        of the conversation's length. Raises ValueError when the template does not render the probe's
        assistant content verbatim."""
        head = [{"role": "user", "content": "x"}, {"role": "assistant", "content": SENTINEL}]
        text, slots = self._render_with_plain_slots(
            new_messages, lambda msgs: self.render([*head, *msgs], tool_schemas, add_generation_prompt=True))
        # the first sentinel is ours: a later one can only come from an observation's text
        at = text.find(SENTINEL)
        if at < 0:
            raise ValueError("the chat template did not render the assistant message's content verbatim; "
                             "this template cannot be extended incrementally")
        after = text[at + len(SENTINEL):]
        if last_output_ids:
            last = int(last_output_ids[-1])
            if last in self._added_ids:
                eot = self._text_of(last)
                if eot and after.startswith(eot):
                    after = after[len(eot):]
        return self._encode_marked(after, slots)

    # -- special-token text in observations -----------------------------------------------------------------
    def special_texts(self) -> list[str]:
        """The texts of the tokenizer's special and added tokens (``<|im_end|>``, ...), longest first."""
        if self._special_texts is None:
            texts = {self._text_of(i) for i in self._added_ids}
            self._special_texts = sorted((t for t in texts if t), key=len, reverse=True)
        return self._special_texts

    def has_special_text(self, text: str) -> bool:
        """True when ``text`` contains the text of a special or added token, or the loop's own probe markers."""
        return SENTINEL in text or _MARK_PREFIX in text or any(t in text for t in self.special_texts())

    def encode_plain(self, text: str) -> list[int]:
        """Token ids of ``text`` read as plain text: a special token's text (``<|im_end|>``) becomes ordinary
        tokens, never the special token. Used for text the agent or its environment wrote."""
        return list(self.tokenizer(text, add_special_tokens=False, split_special_tokens=True)["input_ids"])

    def _render_with_plain_slots(self, messages: Sequence[dict], render) -> tuple[str, dict[str, str]]:
        """``render(messages)`` with every non-assistant content text that holds special-token text replaced
        by a marker, and the map marker -> that text *as the template renders it* (trimmed, JSON-encoded...).

        Observations are written by tools, and so by the agent (printed output, files, memory): a
        ``<|im_end|><|im_start|>assistant`` in them must stay text, not end the turn. Assistant content is the
        model's own (kept as ids) and templates parse it (``</think>``), so it is never marked. Each slot's
        rendered text is found by rendering once more with only that slot restored: everything around it is
        the same string. Raises ValueError when the template renders a marker other than exactly once."""
        where: list[tuple[int, int | None, str]] = []  # (message index, part index or None, original text)
        marked: list[dict] = []
        for mi, m in enumerate(messages):
            content = m.get("content")
            if m.get("role") == "assistant":
                marked.append(m)
            elif isinstance(content, str) and self.has_special_text(content):
                where.append((mi, None, content))
                marked.append({**m, "content": f"{_MARK_PREFIX}{len(where) - 1}q7"})
            elif isinstance(content, list):
                parts = []
                for pi, part in enumerate(content):
                    text = part.get("text") if isinstance(part, dict) else None
                    if isinstance(text, str) and self.has_special_text(text):
                        where.append((mi, pi, text))
                        part = {**part, "text": f"{_MARK_PREFIX}{len(where) - 1}q7"}
                    parts.append(part)
                marked.append({**m, "content": parts})
            else:
                marked.append(m)
        text = render(marked)
        slots: dict[str, str] = {}
        for k, (mi, pi, original) in enumerate(where):
            mark = f"{_MARK_PREFIX}{k}q7"
            if text.count(mark) != 1:
                raise ValueError(f"the chat template rendered message {mi}'s content {text.count(mark)} times; "
                                 "text holding special tokens cannot be tokenised as plain text")
            variant = [dict(m) for m in marked]
            if pi is None:
                variant[mi]["content"] = original
            else:
                variant[mi]["content"] = [dict(p) for p in variant[mi]["content"]]
                variant[mi]["content"][pi]["text"] = original
            restored = render(variant)
            at = text.index(mark)
            head, tail = text[:at], text[at + len(mark):]
            if not (restored.startswith(head) and restored.endswith(tail)) or len(restored) < len(head) + len(tail):
                raise ValueError(f"the chat template renders message {mi}'s content differently with its text "
                                 "in place; text holding special tokens cannot be tokenised as plain text")
            slots[mark] = restored[len(head):len(restored) - len(tail)]
        return text, slots

    def _encode_marked(self, text: str, slots: dict[str, str]) -> list[int]:
        """Ids of rendered ``text`` where each marker of ``slots`` is replaced by its text tokenised as plain
        text (:meth:`encode_plain`) and the template's own text around it is tokenised normally."""
        if not slots:
            return self.encode(text)
        pieces = re.split(f"({re.escape(_MARK_PREFIX)}\\d+q7)", text)
        ids: list[int] = []
        for i, piece in enumerate(pieces):
            ids += self.encode_plain(slots[piece]) if i % 2 else self.encode(piece)
        return ids

    def check_drift(self, trajectory: Any, messages: list[dict], tool_schemas: list[dict]) -> None:
        """The chat format contract's optional ``check_drift``: :func:`.drift.check_drift` with this template
        (sets the trajectory's ``retok_drift*`` metrics; never raises for a template that cannot re-render)."""
        from .drift import check_drift

        check_drift(trajectory, self, messages, tool_schemas)

    def needs_rerender(self, messages: Sequence[dict], new_messages: Sequence[dict]) -> bool:
        """True when appending ``new_messages`` would make the template drop thinking the context holds
        (Qwen3-style templates after a new user message) and ``keep_thinking`` is off."""
        if self.keep_thinking or not self.drops_thinking:
            return False
        if not any(m.get("role") == "user" for m in new_messages):
            return False
        return any(m.get("role") == "assistant" and "</think>" in (m.get("content") or "") for m in messages)

    def _special_ids(self) -> set[int]:
        """Ids of the tokens the tokenizer marks special (dropped by ``skip_special_tokens``)."""
        if getattr(self, "_special_id_set", None) is None:
            decoder = getattr(self.tokenizer, "added_tokens_decoder", None) or {}
            self._special_id_set = {int(i) for i, tok in decoder.items() if getattr(tok, "special", False)}
            self._special_id_set |= {int(i) for i in (getattr(self.tokenizer, "all_special_ids", None) or [])}
        return self._special_id_set

    # -- probes ------------------------------------------------------------------------------------------
    def _text_of(self, token_id: int) -> str:
        if token_id not in self._token_text:
            self._token_text[token_id] = self.tokenizer.decode([token_id], skip_special_tokens=False)
        return self._token_text[token_id]

    def _probe_tools(self) -> bool:
        try:
            kwargs: dict[str, Any] = {**self.template_kwargs, "tokenize": False, "add_generation_prompt": True,
                                      "tools": [_PROBE_TOOL]}
            if self.chat_template is not None:
                kwargs["chat_template"] = self.chat_template
            text = self.tokenizer.apply_chat_template([{"role": "user", "content": "x"}], **kwargs)
        except Exception as exc:  # a template that chokes on tools= does not support them
            log.debug("chat template rejected tools=: %s", exc)
            return False
        return _PROBE_TOOL["function"]["name"] in text

    def _probe_tool_role(self) -> str:
        try:
            text = self.render([{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"},
                                {"role": "tool", "content": "PROBEOBS"}])
        except Exception as exc:
            log.info("chat template rejects the tool role (%s); observations are sent as user messages", exc)
            return "user"
        return "tool" if "PROBEOBS" in text else "user"

    def _probe_call_ids(self) -> str:
        """How the template treats an observation's ``tool_call_id``: ``rendered`` (it writes the id, as
        Kimi-K2's ``## Return of <id>``), ``ignored``, or ``rejected`` (it raises, as Mistral's on ids of
        another shape; :meth:`render` then leaves the ids out)."""
        head = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]
        try:
            observation = {"role": self.observation_role, "content": "z", "tool_call_id": "probe-call-7q"}
            text = self.render([*head, observation])
        except Exception as exc:
            log.info("the chat template rejects tool_call_id on observations (%s); ids stay in the transcript "
                     "only", exc)
            return "rejected"
        return "rendered" if "probe-call-7q" in text else "ignored"

    def _probe_keeps_generation_prompt(self) -> bool:
        """Whether an earlier assistant turn is rendered after the full generation prompt it was generated
        from. Qwen3 with ``enable_thinking=False`` puts an empty ``<think></think>`` block in the prompt but
        renders earlier turns without it: then the context the loop keeps (what the model saw) differs from a
        re-render of the conversation by that block per turn."""
        try:
            prompt = self.render([{"role": "user", "content": "x"}], add_generation_prompt=True)
            later = self.render([{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"},
                                 {"role": self.observation_role, "content": "z"}], add_generation_prompt=False)
        except Exception:
            return True
        return later.startswith(prompt)

    def _probe_drops_thinking(self) -> bool:
        try:
            text = self.render([{"role": "user", "content": "a"},
                                {"role": "assistant", "content": "<think>\nPROBETHINK\n</think>\n\nok"},
                                {"role": "user", "content": "b"}])
        except Exception:
            return False
        return "PROBETHINK" not in text
