"""Built-in chat format: the rollout session formats every conversation with the chat format ``default``
(``register_chat_formats``); this plugin registers :class:`.template.ChatFormat`, the tokenizer's own chat template
probed once and extended by token ids. A plugin with its own renderer (a model whose tokenizer has no usable
template) registers ``default`` itself (a plain or ``tryfirst`` hookimpl) and replaces it."""

from __future__ import annotations

from skyrl_core.hookspecs import hookimpl


@hookimpl(trylast=True)
def register_chat_formats(register):
    from .template import ChatFormat

    register(ChatFormat, name="default")
