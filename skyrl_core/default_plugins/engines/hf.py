"""In-process transformers engine with continuous batching.

One worker thread owns the model and runs the decode loop; ``generate`` (async) queues a request and awaits a
future, so the event loop never blocks on torch. Requests that arrive while a batch is decoding join it at the
next decode step (continuous batching): the newcomers are prefilled together (left-padded), their KV cache is
left-padded to the running batch's length and concatenated along the batch dimension. Finished rows leave the
batch at once and all-padding columns are trimmed, so a long prompt does not slow the batch after it finishes.

Logprobs: each ``output_logprobs[i]`` is the log-probability of the sampled token under the distribution it was
actually sampled from: logits / temperature, then top-k, then top-p (renormalised). At temperature 1 with
top_p 1 and top_k -1 that is exactly ``log_softmax(raw logits)``, the quantity a trainer recomputes. Greedy
calls (temperature 0) report the raw ``log_softmax`` (temperature 1) of the chosen token.

Weights: ``model`` is the live torch module. A trainer may update it in place (then call
``await engine.update_weights(None)``) or pass a state dict; either way the engine bumps its weights version and
re-prefills every running request (prompt + tokens so far) before the next decode step, so no KV cache computed
with old weights is reused. Forward passes run under ``torch.no_grad()`` in eval mode; the module's previous
train/eval mode is restored after each step, so a trainer sharing it is not disturbed.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import deque
from typing import Any

import attrs

from skyrl_core.errors import ConfigError, SkyrlError
from skyrl_core.inference.base import Engine, EngineError, EngineStalled, GenerationOutput, SamplingParams

from .calls import CallClock, bounded_call

log = logging.getLogger(__name__)


@attrs.define(eq=False)
class _Request:
    """One queued or running generation. ``pending`` is the last sampled token, not yet in the KV cache."""

    prompt: list[int]
    sampling: SamplingParams
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future
    max_new: int
    generator: Any = None
    output: list[int] = attrs.Factory(list)
    logprobs: list[float] = attrs.Factory(list)
    finish_reason: str | None = None
    cancelled: bool = False
    clock: CallClock = attrs.Factory(CallClock)


class HFEngine(Engine):
    """Transformers model served in-process with continuous batching (CPU or GPU).

    Args:
        model: a bundled model name (``smollm2-135m-instruct``) or a local Hugging Face directory.
        max_batch: most requests decoded together; more wait in a queue (``stats.queued``).
        device: ``auto`` (cuda when available, else cpu), ``cpu``, ``cuda``, ``cuda:N``.
        dtype: ``auto`` | ``float32`` | ``bfloat16`` | ``float16``.
        max_context: context window in tokens (prompt + generation); default: the model's
            ``max_position_embeddings``. A request reaching it finishes with ``length``.
        timeout_s: a call fails with EngineStalled when, once admitted into the batch, it gets no new token for
            this many seconds (``engine.timeout_s``); waiting in the queue for a slot does not count. None: off.
        call_timeout_s: the whole call's bound in seconds, queueing included (``engine.call_timeout_s``).

    Raises ConfigError for a bad model name, device or max_batch; MissingExtraError without torch/transformers.
    """

    name = "hf"

    def __init__(self, model: str = "smollm2-135m-instruct", max_batch: int = 16, device: str = "auto",
                 dtype: str = "auto", max_context: int | None = None, timeout_s: float | None = None,
                 call_timeout_s: float | None = None) -> None:
        super().__init__()
        from skyrl_core.default_plugins.engines.models import load_causal_lm, load_tokenizer

        import torch

        if max_batch < 1:
            raise ConfigError(f"engine.max_batch must be >= 1, got {max_batch}")
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise ConfigError(f"engine.device '{device}' requested but torch sees no CUDA device; use cpu or auto")
        if not (device == "cpu" or device.startswith("cuda")):
            raise ConfigError(f"engine.device '{device}' is not one of auto, cpu, cuda, cuda:N")
        self.model_name = model
        self.timeout_s = timeout_s
        self.call_timeout_s = call_timeout_s
        self.device = device
        self.max_batch = max_batch
        self.tokenizer = load_tokenizer(model)
        self.model = load_causal_lm(model, device=device, dtype=dtype)
        self.model.eval()
        cfg = self.model.config
        cfg = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
        window = getattr(cfg, "max_position_embeddings", None) or 2048
        self.max_context = int(max_context or window)
        self.stats.capacity = max_batch
        eos = self.model.generation_config.eos_token_id if self.model.generation_config else None
        eos_ids = set(eos if isinstance(eos, (list, tuple)) else [eos] if eos is not None else [])
        if self.tokenizer.eos_token_id is not None:
            eos_ids.add(self.tokenizer.eos_token_id)
        self.eos_token_ids = frozenset(int(e) for e in eos_ids)
        pad = self.tokenizer.pad_token_id
        self._pad_id = int(pad if pad is not None else min(self.eos_token_ids or {0}))
        self._queue: deque[_Request] = deque()
        self._cond = threading.Condition()
        # Held for each forward step and for weight loads, so a state dict never lands mid-forward.
        self._step_lock = threading.Lock()
        self._weights_version = 0
        self._closed = False
        self._thread: threading.Thread | None = None
        self._default_generator = torch.Generator(device=device)
        self._default_generator.seed()

    # -- public API ----------------------------------------------------------------------------------------
    async def generate(self, input_ids: list[int], sampling: SamplingParams) -> GenerationOutput:
        """Generate a continuation of ``input_ids`` [prompt_len] (token ids, never re-encoded).

        Returns ``output_ids`` [gen_len] exactly as sampled (an EOS token is included), ``output_logprobs``
        [gen_len] (None when ``sampling.logprobs`` is false), ``finish_reason`` ``stop`` (EOS or a stop string,
        whose text stays in the output) or ``length`` (``max_tokens`` or the context window), and the decoded
        ``text``. Raises EngineError when the engine is closed or its forward pass fails, EngineStalled past
        ``timeout_s`` without a token or ``call_timeout_s`` in all, SkyrlError for an empty prompt or token ids
        outside the vocabulary.
        """
        import torch

        if self._closed:
            raise EngineError("hf engine is closed; create a new one")
        if not input_ids:
            raise SkyrlError("hf engine: input_ids is empty; a prompt needs at least one token")
        vocab = self.model.get_input_embeddings().num_embeddings
        bad = [t for t in input_ids if not (0 <= int(t) < vocab)]
        if bad:
            raise SkyrlError(f"hf engine: token ids {bad[:5]} are outside the vocabulary [0, {vocab})")
        if sampling.temperature < 0 or not (0 < sampling.top_p <= 1) or sampling.max_tokens < 0:
            raise SkyrlError(f"hf engine: invalid sampling {sampling}: need temperature >= 0, 0 < top_p <= 1, "
                             f"max_tokens >= 0")
        loop = asyncio.get_running_loop()
        max_new = min(sampling.max_tokens, self.max_context - len(input_ids))
        if max_new <= 0:
            return GenerationOutput(output_ids=[], output_logprobs=[] if sampling.logprobs else None,
                                    finish_reason="length", text="")
        generator = None
        if sampling.seed is not None:
            generator = torch.Generator(device=self.device)
            generator.manual_seed(int(sampling.seed))
        req = _Request(prompt=[int(t) for t in input_ids], sampling=sampling, loop=loop,
                       future=loop.create_future(), max_new=max_new, generator=generator)
        with self._cond:
            self._queue.append(req)
            self.stats.queued += 1
            self._ensure_worker()
            self._cond.notify()
        try:
            return await bounded_call(asyncio.shield(req.future), req.clock, self.timeout_s, self.call_timeout_s,
                                      self.name)
        except (asyncio.CancelledError, EngineStalled):
            req.cancelled = True  # the worker drops the row at its next step
            raise

    async def update_weights(self, state_dict: dict[str, Any] | None = None) -> None:
        """Load ``state_dict`` (parameter name -> tensor; a subset is fine) into ``model``, or, with None, only
        record that ``model`` was changed in place. Running requests are re-prefilled with the new weights
        before their next token. Raises SkyrlError naming unknown keys or mismatched shapes."""
        await asyncio.to_thread(self._load_weights, state_dict)

    async def close(self) -> None:
        """Stop the worker thread; queued and running requests fail with EngineError. Safe to call twice."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        thread = self._thread
        if thread is not None:
            await asyncio.to_thread(thread.join, 30)
        self._thread = None

    # -- weights -------------------------------------------------------------------------------------------
    def _load_weights(self, state_dict: dict[str, Any] | None) -> None:
        import torch

        with self._step_lock:
            if state_dict is not None:
                own = self.model.state_dict()
                unknown = [k for k in state_dict if k not in own]
                if unknown:
                    raise SkyrlError(f"hf engine update_weights: unknown parameter names {unknown[:5]}; "
                                     f"expected names like {list(own)[:3]}")
                wrong = [k for k, v in state_dict.items() if tuple(v.shape) != tuple(own[k].shape)]
                if wrong:
                    raise SkyrlError(f"hf engine update_weights: shape mismatch for {wrong[:5]} "
                                     f"(got {tuple(state_dict[wrong[0]].shape)}, "
                                     f"model has {tuple(own[wrong[0]].shape)})")
                with torch.no_grad():
                    self.model.load_state_dict(state_dict, strict=False)
            self._weights_version += 1

    # -- worker --------------------------------------------------------------------------------------------
    def _ensure_worker(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._worker, name="skyrl-hf-engine", daemon=True)
            self._thread.start()

    def _resolve(self, req: _Request, result: Any = None, error: BaseException | None = None) -> None:
        def settle() -> None:
            if req.future.done():
                return
            if error is not None:
                req.future.set_exception(error)
            else:
                req.future.set_result(result)

        try:
            req.loop.call_soon_threadsafe(settle)
        except RuntimeError:  # the caller's loop is gone; nobody is waiting
            pass

    def _finish(self, req: _Request) -> None:
        with self._cond:
            self.stats.finished(len(req.output))
        text = self.tokenizer.decode(req.output, skip_special_tokens=True)
        self._resolve(req, GenerationOutput(output_ids=list(req.output),
                                            output_logprobs=list(req.logprobs) if req.sampling.logprobs else None,
                                            finish_reason=req.finish_reason or "length", text=text))

    def _fail(self, reqs: list[_Request], exc: BaseException) -> None:
        with self._cond:
            for req in reqs:
                self.stats.finished(len(req.output))
                self.stats.errors += 1
        for req in reqs:
            self._resolve(req, error=EngineError(f"hf engine forward pass failed: {type(exc).__name__}: {exc}"))

    def _worker(self) -> None:
        batch = _Batch(self)
        while True:
            with self._cond:
                while not self._closed and not self._queue and not batch.rows:
                    self._cond.wait(timeout=1.0)
                if self._closed:
                    leftover = list(self._queue) + batch.rows
                    self._queue.clear()
                    self.stats.queued = 0
                    break
                admitted: list[_Request] = []
                while self._queue and len(batch.rows) + len(admitted) < self.max_batch:
                    req = self._queue.popleft()
                    self.stats.queued -= 1
                    if req.cancelled:
                        continue
                    self.stats.started(len(req.prompt))
                    req.clock.admit()
                    self.stats.queue_wait_s += req.clock.queue_s()
                    admitted.append(req)
            try:
                with self._step_lock:
                    batch.step(admitted)
            except Exception as exc:  # a failing forward fails its requests, never the worker
                log.exception("hf engine step failed")
                self._fail(batch.rows + [r for r in admitted if r not in batch.rows], exc)
                batch = _Batch(self)
        for req in leftover:
            self._resolve(req, error=EngineError("hf engine was closed before this request finished"))


class _Batch:
    """The running batch: rows (requests), their left-padded attention mask [rows, cache_len] and KV cache."""

    def __init__(self, engine: HFEngine) -> None:
        self.engine = engine
        self.rows: list[_Request] = []
        self.mask = None
        self.cache = None
        self.version = engine._weights_version

    def step(self, admitted: list[_Request]) -> None:
        """Admit newcomers (prefill), else run one decode step; then drop finished rows."""
        import torch

        eng = self.engine
        model = eng.model
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                if self.rows and self.version != eng._weights_version:
                    # Weights changed: recompute every running row's cache from prompt + output so far.
                    old = self.rows
                    self.rows, self.mask, self.cache = [], None, None
                    self._prefill(old, resample=False)
                self.version = eng._weights_version
                if self.rows:
                    self._decode()
                if admitted:
                    self._prefill(admitted, resample=True)
        finally:
            if was_training:
                model.train()
        self._prune()

    # -- forward passes ------------------------------------------------------------------------------------
    def _prefill(self, reqs: list[_Request], resample: bool) -> None:
        """Run the newcomers' prompts (left-padded) and merge their cache into the batch. With ``resample``
        the first token is sampled; without it (a weight-update re-prefill) the last output token stays
        pending and the sequence fed is prompt + output[:-1]."""
        import torch
        from transformers import DynamicCache

        eng = self.engine
        seqs = [r.prompt + (r.output[:-1] if not resample else []) for r in reqs]
        width = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), width), eng._pad_id, dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for i, s in enumerate(seqs):
            ids[i, width - len(s):] = torch.tensor(s, dtype=torch.long)
            mask[i, width - len(s):] = 1
        ids, mask = ids.to(eng.device), mask.to(eng.device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        cache = DynamicCache(config=eng.model.config)
        out = eng.model(input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=cache,
                        use_cache=True, logits_to_keep=1)
        with eng._cond:
            eng.stats.forward_passes += 1
        if resample:
            self._sample(reqs, out.logits[:, -1, :])
        self._merge(reqs, mask, out.past_key_values)

    def _decode(self) -> None:
        import torch

        eng = self.engine
        n = len(self.rows)
        last = torch.tensor([[r.output[-1]] for r in self.rows], dtype=torch.long, device=eng.device)
        positions = self.mask.sum(-1, keepdim=True)
        self.mask = torch.cat([self.mask, torch.ones((n, 1), dtype=self.mask.dtype, device=eng.device)], dim=-1)
        out = eng.model(input_ids=last, attention_mask=self.mask, position_ids=positions,
                        past_key_values=self.cache, use_cache=True)
        self.cache = out.past_key_values
        with eng._cond:
            eng.stats.forward_passes += 1
            eng.stats.decode_steps += 1
            eng.stats.decode_rows += n
            eng.stats.max_batch_seen = max(eng.stats.max_batch_seen, n)
        self._sample(self.rows, out.logits[:, -1, :])

    def _merge(self, reqs: list[_Request], mask, cache) -> None:
        """Concatenate the newcomers' cache to the batch's, left-padding the shorter one."""
        import torch
        from transformers import DynamicCache

        if not self.rows:
            self.rows, self.mask, self.cache = list(reqs), mask, cache
            return
        width = max(self.mask.shape[1], mask.shape[1])

        def lpad(t, dim):
            extra = width - t.shape[dim]
            if extra == 0:
                return t
            shape = list(t.shape)
            shape[dim] = extra
            return torch.cat([torch.zeros(shape, dtype=t.dtype, device=t.device), t], dim=dim)

        layers = []
        for old, new in zip(self.cache.layers, cache.layers):
            layers.append((torch.cat([lpad(old.keys, 2), lpad(new.keys, 2)], dim=0),
                           torch.cat([lpad(old.values, 2), lpad(new.values, 2)], dim=0)))
        self.cache = DynamicCache(ddp_cache_data=layers, config=self.engine.model.config)
        self.mask = torch.cat([lpad(self.mask, 1), lpad(mask, 1)], dim=0)
        self.rows = self.rows + list(reqs)

    # -- sampling and finishing ----------------------------------------------------------------------------
    def _sample(self, reqs: list[_Request], logits) -> None:
        """Pick one token per row (its own temperature / top-k / top-p / generator), record its logprob and
        check EOS, stop strings and length."""
        import torch

        eng = self.engine
        logits = logits.float()
        raw_logp = torch.log_softmax(logits, dim=-1)
        for i, req in enumerate(reqs):
            sp = req.sampling
            if sp.temperature == 0:
                token = int(torch.argmax(logits[i]))
                logp = float(raw_logp[i, token])
            else:
                scaled = logits[i] / sp.temperature
                if 0 < sp.top_k < scaled.shape[-1]:
                    kth = torch.topk(scaled, sp.top_k).values[-1]
                    scaled = scaled.masked_fill(scaled < kth, float("-inf"))
                if sp.top_p < 1.0:
                    sorted_logits, order = torch.sort(scaled, descending=True)
                    cum = torch.softmax(sorted_logits, dim=-1).cumsum(-1)
                    # drop a token when the mass before it already reaches top_p (the first is always kept)
                    drop_sorted = (cum - torch.softmax(sorted_logits, dim=-1)) >= sp.top_p
                    drop = torch.zeros_like(drop_sorted).scatter(0, order, drop_sorted)
                    scaled = scaled.masked_fill(drop, float("-inf"))
                logp_all = torch.log_softmax(scaled, dim=-1) if (sp.temperature != 1 or sp.top_k > 0
                                                                  or sp.top_p < 1) else raw_logp[i]
                token = int(torch.multinomial(logp_all.exp(), 1, generator=req.generator or eng._default_generator))
                logp = float(logp_all[token])
            req.output.append(token)
            req.logprobs.append(logp)
            req.clock.tick()
            if token in eng.eos_token_ids:
                req.finish_reason = "stop"
            elif sp.stop and self._hit_stop(req):
                req.finish_reason = "stop"
            elif len(req.output) >= req.max_new:
                req.finish_reason = "length"

    def _hit_stop(self, req: _Request) -> bool:
        # Decode a tail long enough to hold any stop string plus the newest token (each token is >= 1 char
        # except special/partial-byte tokens, hence the margin).
        window = max(len(s) for s in req.sampling.stop) + 8
        tail = self.engine.tokenizer.decode(req.output[-window:], skip_special_tokens=False)
        return any(s in tail for s in req.sampling.stop)

    def _prune(self) -> None:
        """Resolve finished or cancelled rows, drop them from mask and cache, trim all-padding columns."""
        import torch

        if not self.rows:
            return
        keep = [i for i, r in enumerate(self.rows) if r.finish_reason is None and not r.cancelled]
        if len(keep) == len(self.rows):
            return
        for i, r in enumerate(self.rows):
            if i not in keep:
                if r.cancelled and r.finish_reason is None:
                    with self.engine._cond:
                        self.engine.stats.finished(len(r.output))
                else:
                    self.engine._finish(r)
        if not keep:
            self.rows, self.mask, self.cache = [], None, None
            return
        idx = torch.tensor(keep, dtype=torch.long, device=self.mask.device)
        self.rows = [self.rows[i] for i in keep]
        self.mask = self.mask.index_select(0, idx)
        used = self.mask.any(dim=0).nonzero()
        start = int(used[0]) if used.numel() else 0
        self.mask = self.mask[:, start:]
        for layer in self.cache.layers:
            layer.keys = layer.keys.index_select(0, idx)[:, :, start:]
            layer.values = layer.values.index_select(0, idx)[:, :, start:]
