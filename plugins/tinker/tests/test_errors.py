"""The service's failures named in one message (auth, quota, server error, connection), keys kept out of
configs, and bad settings rejected before anything is sent."""

from __future__ import annotations

import http.server
import json
import threading

import httpx
import pytest
import tinker

from skyrl_core.config import config_from_dict
from skyrl_core.errors import ConfigError
from skyrl_tinker.client import TinkerServiceError, call, describe_error, make_service_client, service_settings

URL = "http://127.0.0.1:9"


def status_error(cls, status: int):
    request = httpx.Request("POST", f"{URL}/api/v1/forward_backward")
    return cls(f"Error code: {status}", response=httpx.Response(status, request=request), body=None)


@pytest.mark.parametrize("exc, kind, words", [
    (status_error(tinker.AuthenticationError, 401), "auth", "TINKER_API_KEY"),
    (status_error(tinker.PermissionDeniedError, 403), "auth", "TINKER_API_KEY"),
    (status_error(tinker.RateLimitError, 429), "quota", "quota"),
    (status_error(tinker.InternalServerError, 503), "server", "5xx"),
    (status_error(tinker.UnprocessableEntityError, 422), "request", "rejected"),
    (tinker.APIConnectionError(request=httpx.Request("GET", URL)), "connection", "serve-local"),
])
def test_each_failure_kind_is_named_once_with_operation_and_url(exc, kind, words):
    err = describe_error(exc, "forward_backward", URL)
    assert err.kind == kind
    text = str(err)
    assert text.startswith(f"Tinker forward_backward at {URL} failed ({kind}")
    assert words in text
    assert type(exc).__name__ in text


class Refuses(http.server.BaseHTTPRequestHandler):
    """A real HTTP server that refuses every request with 401, as the service does for a wrong key."""

    def _refuse(self):
        body = json.dumps({"detail": "invalid API key"}).encode()
        self.send_response(401)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _refuse

    def log_message(self, *args):
        pass


@pytest.mark.timeout(120)
async def test_a_refused_key_from_a_real_server_is_one_auth_error():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Refuses)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        service = make_service_client({"base_url": url, "api_key": "tml-wrong-key"})
        with pytest.raises(TinkerServiceError) as info:
            await call(service.create_lora_training_client, base_model="m", rank=4,
                       operation="create_lora_training_client", base_url=url)
    finally:
        server.shutdown()
    assert info.value.kind == "auth"
    assert info.value.status == 401
    assert f"create_lora_training_client at {url} failed (auth HTTP 401)" in str(info.value)


def test_missing_or_malformed_key_fails_before_anything_is_sent(monkeypatch):
    with pytest.raises(TinkerServiceError, match="set TINKER_API_KEY") as info:
        make_service_client({"base_url": URL, "api_key": None})
    assert info.value.kind == "auth"
    with pytest.raises(TinkerServiceError, match="does not start with 'tml-'"):
        make_service_client({"base_url": URL, "api_key": "sk-openai-style"})


def test_settings_come_from_env_and_keys_never_from_options(monkeypatch):
    monkeypatch.setenv("TINKER_API_KEY", "tml-from-env")
    monkeypatch.setenv("TINKER_BASE_URL", "http://127.0.0.1:8123")
    config = config_from_dict({"model": "smollm2-135m-instruct", "engine": {"type": "tinker"},
                               "backend": {"type": "tinker"}})
    assert service_settings(config) == {"base_url": "http://127.0.0.1:8123", "api_key": "tml-from-env",
                                        "base_model": "HuggingFaceTB/SmolLM2-135M-Instruct"}
    config = config_from_dict({"engine": {"type": "tinker", "options": {"base_url": "http://127.0.0.1:1"}},
                               "backend": {"type": "tinker", "options": {"base_model": "my/model"}}})
    assert service_settings(config)["base_url"] == "http://127.0.0.1:1"
    assert service_settings(config)["base_model"] == "my/model"
    config = config_from_dict({"backend": {"type": "tinker", "options": {"api_key": "tml-leak"}}})
    with pytest.raises(ConfigError, match="backend.options.api_key"):
        service_settings(config)
