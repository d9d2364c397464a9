"""One redaction for every URL itlr shows: a cluster's, an embedding endpoint's, an LLM's.

A URL may carry a user and password (`https://admin:pw@host:9200`), with or without a scheme
(`admin:pw@host:9200`), on any of several comma-separated hosts. `redact_url` takes the userinfo
off every host, whatever the form, and `split_credentials` also returns it, so that the
credentials move to the client's auth and no message or log line can show them with the URL.
Nothing here parses ports: a malformed host is the client's to refuse, never a traceback here.
"""

from __future__ import annotations

from urllib.parse import unquote

from itlr.errors import ConfigurationError


def _split_host(part: str) -> tuple[str, str | None]:
    """One host of a URL without its userinfo, and the userinfo (None when there is none)."""
    scheme, marker, rest = part.partition("://")
    if not marker:
        scheme, rest = "", part
    else:
        scheme += marker
    # The authority ends at the path, query or fragment; its userinfo at its last `@` (a
    # password with an unescaped `@` still comes off whole).
    end = min((rest.find(mark) for mark in "/?#" if mark in rest), default=len(rest))
    authority, tail = rest[:end], rest[end:]
    if "@" not in authority:
        return part, None
    userinfo, host = authority.rsplit("@", 1)
    return scheme + host + tail, userinfo


def redact_url(url: str) -> str:
    """`url` with the userinfo of every host taken off."""
    return ",".join(_split_host(part)[0] for part in url.split(","))


def split_credentials(url: str) -> tuple[str, str | None, str | None]:
    """`https://user:pass@host:9200` -> (`https://host:9200`, user, pass), for every form
    `redact_url` knows; one user for the cluster, so hosts naming different ones are refused
    (in a line that shows neither)."""
    hosts, found = [], []
    for part in url.split(","):
        host, userinfo = _split_host(part)
        hosts.append(host)
        if userinfo is not None and userinfo not in found:
            found.append(userinfo)
    if len(found) > 1:
        raise ConfigurationError(
            "the hosts of `url` name different users: give the cluster's one user with `user` "
            "and `password` (or once, on the first host)"
        )
    if not found:
        return url, None, None
    user, colon, password = found[0].partition(":")
    return ",".join(hosts), unquote(user), unquote(password) if colon else None


__all__ = ["redact_url", "split_credentials"]
