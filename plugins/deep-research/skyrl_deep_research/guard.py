"""The leakage guard: a domain blocklist applied to search results and page fetches.

A question's answer must come from reading, not from a copy of the dataset: pages on the blocked domains (and
their subdomains) are dropped from search results and refused by ``open_page``, and every blocked attempt is
counted in the trajectory's metrics.
"""

from __future__ import annotations

import urllib.parse
from typing import Iterable

# Where datasets, their answers and solutions are published.
DEFAULT_BLOCKLIST = ("huggingface.co", "hf.co", "github.com", "githubusercontent.com", "gitlab.com", "chegg.com")
# HotpotQA's own hosts (its site and its download server).
HOTPOTQA_HOSTS = ("hotpotqa.github.io", "curtis.ml.cmu.edu")


class Blocklist:
    """Blocked domains; ``blocks(url)`` is True when the URL's host is one of them or a subdomain of one.
    A URL without a host (``javascript:``, ``file:``, a bare word) is blocked too: only http(s) pages open."""

    def __init__(self, domains: Iterable[str]) -> None:
        self.domains = tuple(sorted({d.strip().lower().lstrip(".") for d in domains if d and d.strip()}))

    def blocks(self, url: str) -> bool:
        parts = urllib.parse.urlsplit(url.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            return True
        host = parts.hostname.lower().rstrip(".")
        return any(host == d or host.endswith("." + d) for d in self.domains)

    def reason(self, url: str) -> str:
        parts = urllib.parse.urlsplit(url.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            return f"'{url}' is not an http(s) URL"
        return f"'{parts.hostname.rstrip('.')}' is on the blocklist (leakage guard)"


def private_host(url: str) -> bool:
    """True when the URL's host is ``localhost`` or an IP literal in a loopback, private, link-local or reserved
    range (cloud metadata at 169.254.169.254, the host's own services): an agent must not reach those through
    ``open_page``. Names are not resolved here (a public name pointing at a private address is not caught)."""
    import ipaddress

    host = (urllib.parse.urlsplit(url.strip()).hostname or "").lower().rstrip(".")
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    return ip.is_loopback or ip.is_private or ip.is_link_local or ip.is_reserved or ip.is_unspecified


def make_blocklist(options: dict) -> Blocklist:
    """From a runtime's options: ``blocklist`` replaces the defaults (DEFAULT_BLOCKLIST + HOTPOTQA_HOSTS) when
    given; ``extra_blocklist`` adds to whichever list is in force. Raises ValueError for a non-list value."""
    base = options.get("blocklist")
    extra = options.get("extra_blocklist", [])
    for key, value in (("blocklist", base), ("extra_blocklist", extra)):
        if value is not None and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            raise ValueError(f"runtime option '{key}' must be a list of domain names, got {value!r}")
    domains = list(DEFAULT_BLOCKLIST + HOTPOTQA_HOSTS) if base is None else list(base)
    return Blocklist(domains + list(extra))
