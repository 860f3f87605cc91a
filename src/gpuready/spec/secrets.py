"""The one masking function every message goes through before a person or a log sees it: :func:`mask`.

What is masked, wherever it appears in a message (an inventory's problem, a check's failure, a report, the CLI's
errors):

- anything that looks like a kubeadm bootstrap token, ``[a-z0-9]{6}.[a-z0-9]{16}``: its secret half (the token ID
  before the dot is public, it names the token's Secret, and is kept so the reader knows which token it was);
- the value of a credential key as a kubeconfig, a containerd config, a ``KEY=VALUE`` or a Python/JSON mapping
  writes it: ``token``, ``client-key-data``, ``password``, ``secret`` and the keys ending in them
  (``ssh_password``, ``id-token``, ``client-secret``), ``auth``, ``identitytoken``; ``Bearer <token>`` and
  ``--token <value>``;
- anything that looks like a JSON Web Token (a service account's or an OIDC token), wherever it stands.

Pure text in, text out: the spec's errors (:class:`gpuready.spec.SpecError`), the conformance plugin and the CLI
call it, so there is one definition of "looks like a secret".
"""

from __future__ import annotations

import re

MASK = "<masked>"

BOOTSTRAP_TOKEN = re.compile(r"(?<![A-Za-z0-9])([a-z0-9]{6})\.[a-z0-9]{16}(?![A-Za-z0-9])")
# a JSON Web Token (a service account's token, an OIDC id-token): base64url of '{"' then two more parts
JWT = re.compile(r"\beyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*")

_SECRET_WORD = r"(?:token|password|passwd|secret|client-key-data|identitytoken|auth)"
_VALUE = r"""(?P<value>"[^"\n]*"|'[^'\n]*'|[^\s"',}\]\)]+)"""
# where a word is a key and not prose ("no bootstrap token: set $GPUREADY_JOIN_TOKEN" stays as it is): at the start of
# a line (YAML, TOML, a list item), after "{" or "," (a mapping), quoted (JSON, a Python repr), before "=" (KEY=VALUE,
# TOML) or a compound key before ":" (ssh_password:, client-key-data:)
_KEY = (
    rf"(?:(?:^|[{{,])[ \t]*(?:-[ \t]+)?[\w.-]*{_SECRET_WORD}[ \t]*[:=]"
    rf"|[\"'][\w.-]*{_SECRET_WORD}[\"'][ \t]*[:=]"
    rf"|(?<![\w.-])[\w.-]*{_SECRET_WORD}[ \t]*="
    rf"|(?<![\w.-])(?:[\w.]+[_-]{_SECRET_WORD}|client-key-data|identitytoken)[ \t]*:"
    r"|\bBearer"
    rf"|--{_SECRET_WORD}(?=[ \t]))"
)
CREDENTIAL = re.compile(rf"(?P<key>{_KEY}[ \t]*){_VALUE}", re.IGNORECASE | re.MULTILINE)


def _credential(match: re.Match[str]) -> str:
    value = match.group("value")
    quote = value[0] if value[:1] in ("'", '"') and len(value) > 1 and value[-1] == value[0] else ""
    if value.strip("'\"") in ("", "null", "None", "~") or value.startswith(("$", "<")):
        return match.group(0)  # nothing secret in it: an empty value, null, a variable's name, already masked
    return f"{match.group('key')}{quote}{MASK}{quote}"


def mask(text: object) -> str:
    """``text`` (made a string) with every bootstrap token and credential value replaced by ``<masked>``."""
    out = str(text)
    out = BOOTSTRAP_TOKEN.sub(lambda m: f"{m.group(1)}.{MASK}", out)
    out = JWT.sub(MASK, out)
    return CREDENTIAL.sub(_credential, out)


def has_secret(text: object) -> bool:
    """Whether :func:`mask` would change ``text``."""
    return mask(text) != str(text)
